//! Acks on request: a blocked `WAIT` asks this node's subscribers to ack at once, as Redis's
//! primary sends `REPLCONF GETACK` to its replicas, and is woken as their Acks come in.
//!
//! Left alone, a subscriber acks at most every `link::ACK_INTERVAL` (50 ms) while ops arrive:
//! an Ack costs both sides a write, a read and task wake-ups, and nothing but `WAIT` needs one
//! sooner. So a `WAIT` that has to wait names the backlog sequence it waits for
//! (`AckRequests::request`); each origin stream, once it has sent that op, sends a heartbeat
//! with `ack_now` (`origin::stream_to`), which the subscriber answers with an Ack as soon as it
//! has merged everything before it (`link::Session::handle`). A `WAIT` then takes about a
//! round trip to its peers, not an ack interval.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct AckRequests {
    /// The highest backlog sequence a waiter wants acked (0: none yet).
    wanted: AtomicU64,
    /// Wakes the streams to carry a new request.
    requested: Notify,
    /// Wakes the waiters on every Ack a subscriber sends.
    acked: Notify,
}

impl AckRequests {
    /// Asks every subscriber to ack once it has merged the op at `seq`.
    pub fn request(&self, seq: u64) {
        if self.wanted.fetch_max(seq, Ordering::SeqCst) < seq {
            self.requested.notify_waiters();
        }
    }

    /// The highest sequence asked for so far. A stream that has sent it asks its subscriber for
    /// an Ack, once per new request.
    pub fn wanted(&self) -> u64 {
        self.wanted.load(Ordering::SeqCst)
    }

    /// Completes on the next request. Take it before reading `wanted`: a request made between
    /// the two still wakes it (`Notify::notify_waiters` reaches every `Notified` created
    /// before the call, polled or not).
    pub fn next_request(&self) -> Notified<'_> {
        self.requested.notified()
    }

    /// Records that a subscriber acked (the origin's reader of its Acks).
    pub fn note_ack(&self) {
        self.acked.notify_waiters();
    }

    /// Completes on the next Ack from any subscriber. Take it before counting the Acks, as
    /// `next_request` before `wanted`.
    pub fn next_ack(&self) -> Notified<'_> {
        self.acked.notified()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    fn ready(future: std::pin::Pin<&mut Notified<'_>>) -> bool {
        matches!(future.poll(&mut Context::from_waker(Waker::noop())), Poll::Ready(()))
    }

    #[test]
    fn a_request_wakes_the_streams_only_when_it_asks_for_more() {
        let acks = AckRequests::default();
        let mut first = pin!(acks.next_request());
        acks.request(10);
        assert!(ready(first.as_mut()), "taken before the request, not yet polled: still woken");
        assert_eq!(acks.wanted(), 10);
        let mut second = pin!(acks.next_request());
        acks.request(7);
        assert!(!ready(second.as_mut()), "an older sequence is covered by the request for 10");
        assert_eq!(acks.wanted(), 10);
        acks.request(11);
        assert!(ready(second.as_mut()));
    }

    #[test]
    fn an_ack_wakes_every_waiter() {
        let acks = AckRequests::default();
        let (mut a, mut b) = (pin!(acks.next_ack()), pin!(acks.next_ack()));
        assert!(!ready(a.as_mut()));
        acks.note_ack();
        assert!(ready(a.as_mut()) && ready(b.as_mut()));
    }
}
