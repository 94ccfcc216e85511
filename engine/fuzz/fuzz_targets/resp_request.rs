//! The RESP request parser on arbitrary client bytes: it never panics, never claims more
//! bytes than it was given, hands out argument ranges inside the buffer, and parses a
//! complete request the same from a buffer that ends where the request ends (a request split
//! across reads at any byte is the same request).
#![no_main]

use keymesh_engine::parse::{parse_request, Limits, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Small limits, so the bounds are exercised, not just the happy path.
    let limits = Limits { max_bulk_len: 4096, max_multibulk_len: 64 };
    let mut buf = data;
    while let Ok(Some(request)) = parse_request(buf, &limits) {
        let used = request.consumed();
        assert!(used > 0 && used <= buf.len(), "consumed {used} of {}", buf.len());
        if let Request::Multibulk { args, .. } = &request {
            assert!(args.iter().all(|r| r.start <= r.end && r.end <= used), "argument outside the request: {args:?}");
        }
        let again = parse_request(&buf[..used], &limits);
        assert_eq!(again, Ok(Some(request)), "the request parsed differently on its own");
        buf = &buf[used..];
    }
});
