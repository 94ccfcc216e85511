//! Pub/sub: channel and pattern subscriptions, and fan-out of `PUBLISH`.
//!
//! Subscribers are reached through their `ClientHandle`'s push channel, so a publisher never
//! waits on a subscriber's socket. A subscriber that stops reading is disconnected once its
//! queued messages exceed `PUSH_LIMIT_BYTES` (Redis's `client-output-buffer-limit pubsub`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::client::ClientHandle;
use crate::frame::Frame;
use crate::glob::glob_match;

pub const PUSH_LIMIT_BYTES: u64 = 32 * 1024 * 1024;

type Subscribers = HashMap<u64, Arc<ClientHandle>>;

#[derive(Default)]
pub struct PubSub {
    channels: RwLock<HashMap<Bytes, Subscribers>>,
    patterns: RwLock<HashMap<Bytes, Subscribers>>,
}

impl PubSub {
    /// Returns true if the client was not yet subscribed.
    pub fn subscribe(&self, channel: &Bytes, client: &Arc<ClientHandle>) -> bool {
        self.channels.write().entry(channel.clone()).or_default().insert(client.id, client.clone()).is_none()
    }

    pub fn unsubscribe(&self, channel: &[u8], client_id: u64) -> bool {
        remove(&mut self.channels.write(), channel, client_id)
    }

    pub fn psubscribe(&self, pattern: &Bytes, client: &Arc<ClientHandle>) -> bool {
        self.patterns.write().entry(pattern.clone()).or_default().insert(client.id, client.clone()).is_none()
    }

    pub fn punsubscribe(&self, pattern: &[u8], client_id: u64) -> bool {
        remove(&mut self.patterns.write(), pattern, client_id)
    }

    /// Delivers a message; returns how many subscriptions received it.
    pub fn publish(&self, channel: &Bytes, message: &Bytes) -> usize {
        let mut receivers = 0;
        if let Some(subs) = self.channels.read().get(channel) {
            let frame = Frame::Push(vec![Frame::bulk("message"), Frame::Bulk(channel.clone()), Frame::Bulk(message.clone())]);
            for client in subs.values() {
                deliver(client, frame.clone(), channel.len() + message.len());
                receivers += 1;
            }
        }
        for (pattern, subs) in self.patterns.read().iter() {
            if !glob_match(pattern, channel, false) {
                continue;
            }
            let frame = Frame::Push(vec![Frame::bulk("pmessage"), Frame::Bulk(pattern.clone()), Frame::Bulk(channel.clone()), Frame::Bulk(message.clone())]);
            for client in subs.values() {
                deliver(client, frame.clone(), pattern.len() + channel.len() + message.len());
                receivers += 1;
            }
        }
        receivers
    }

    /// Active channels matching an optional pattern (`PUBSUB CHANNELS`).
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.channels.read().keys().filter(|c| pattern.is_none_or(|p| glob_match(p, c, false))).cloned().collect()
    }

    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.channels.read().get(channel).map_or(0, |s| s.len())
    }

    pub fn numpat(&self) -> usize {
        self.patterns.read().len()
    }
}

fn remove(map: &mut HashMap<Bytes, Subscribers>, name: &[u8], client_id: u64) -> bool {
    let Some(subs) = map.get_mut(name) else {
        return false;
    };
    let removed = subs.remove(&client_id).is_some();
    if subs.is_empty() {
        map.remove(name);
    }
    removed
}

/// Queues a push frame of about `size` bytes for `client`; a client whose queue passes
/// `PUSH_LIMIT_BYTES` is disconnected.
pub fn deliver(client: &ClientHandle, frame: Frame, size: usize) {
    let pending = client.pending_push.fetch_add(size as u64, Ordering::Relaxed) + size as u64;
    if pending > PUSH_LIMIT_BYTES {
        client.kill();
        return;
    }
    client.push(frame);
}
