//! The kernel's share of a -P 1 request, with the user-space work taken out (issue 16;
//! docs/benchmarks.md, "-P 1 over io_uring, measured"): a server that answers every request
//! with `+PONG` and does nothing else, over
//! - `epoll`: mio, edge-triggered, one read per readiness and the answer written at once, as
//!   tokio and KeyMesh's connections do;
//! - `uring`: io_uring, a recv per connection, each answer's send linked to the next recv, all
//!   the wake's entries submitted in one `io_uring_enter`;
//! - `uring-fixed`: the same with the sockets registered (no file lookup per operation);
//! - `uring-multi`: one multishot recv per connection into a ring of provided buffers (no recv
//!   armed per request), the sends submitted together.
//! `unsafe` throughout (raw buffers handed to the kernel): an experiment, outside the
//! workspace and its lints.
use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::io::{AsRawFd, FromRawFd, IntoRawFd, RawFd};

const BUF: usize = 16 * 1024;

/// One `+PONG` for each request in `input` (a line starting with `*` begins one in RESP, each
/// line is one inline), whatever it asks: the least user-space work a request can cost.
fn answers(input: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let requests = if input.first() == Some(&b'*') {
        input.iter().enumerate().filter(|&(i, &b)| b == b'*' && (i == 0 || input[i - 1] == b'\n')).count()
    } else {
        input.iter().filter(|&&b| b == b'\n').count()
    };
    for _ in 0..requests {
        out.extend_from_slice(b"+PONG\r\n");
    }
}

fn epoll(port: u16) -> std::io::Result<()> {
    use mio::net::{TcpListener, TcpStream};
    use mio::{Events, Interest, Poll, Token};
    let mut poll = Poll::new()?;
    let mut events = Events::with_capacity(1024);
    let mut listener = TcpListener::bind(format!("127.0.0.1:{port}").parse().unwrap())?;
    poll.registry().register(&mut listener, Token(usize::MAX), Interest::READABLE)?;
    let mut conns: Vec<Option<TcpStream>> = Vec::new();
    let mut buf = vec![0u8; BUF];
    let mut out = Vec::with_capacity(BUF);
    loop {
        poll.poll(&mut events, None)?;
        for ev in events.iter() {
            if ev.token() == Token(usize::MAX) {
                while let Ok((mut s, _)) = listener.accept() {
                    s.set_nodelay(true)?;
                    let i = conns.len();
                    poll.registry().register(&mut s, Token(i), Interest::READABLE | Interest::WRITABLE)?;
                    conns.push(Some(s));
                }
                continue;
            }
            let i = ev.token().0;
            let Some(s) = conns[i].as_mut() else { continue };
            loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        conns[i] = None;
                        break;
                    }
                    Ok(n) => {
                        answers(&buf[..n], &mut out);
                        s.write_all(&out)?;
                        if n < buf.len() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => {
                        conns[i] = None;
                        break;
                    }
                }
            }
        }
    }
}

const ACCEPT: u64 = 0;
const RECV: u64 = 1;
const SEND: u64 = 2;

struct Conn {
    fd: RawFd,
    buf: Vec<u8>,
    out: Vec<u8>,
}

/// An accepted socket's descriptor, with Nagle off as the servers compared set it.
fn accepted(fd: RawFd) -> std::io::Result<RawFd> {
    let s = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    s.set_nodelay(true)?;
    Ok(s.into_raw_fd())
}

fn close(conns: &mut [Option<Conn>], i: usize) {
    if let Some(c) = conns[i].take() {
        unsafe { libc::close(c.fd) };
    }
}

fn uring(port: u16, fixed: bool) -> std::io::Result<()> {
    use io_uring::{opcode, squeue, types, IoUring};
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let lfd = listener.as_raw_fd();
    let mut ring = IoUring::builder().setup_single_issuer().setup_coop_taskrun().build(1024)?;
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let accept = opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut()).build().user_data(ACCEPT);
    unsafe { ring.submission().push(&accept).unwrap() };
    if fixed {
        ring.submitter().register_files_sparse(1024)?;
    }
    let recv = |c: &mut Conn, i: usize| -> squeue::Entry {
        if fixed {
            opcode::Recv::new(types::Fixed(i as u32), c.buf.as_mut_ptr(), BUF as u32).build().user_data((i as u64) << 2 | RECV)
        } else {
            opcode::Recv::new(types::Fd(c.fd), c.buf.as_mut_ptr(), BUF as u32).build().user_data((i as u64) << 2 | RECV)
        }
    };
    let mut done: Vec<(u64, i32)> = Vec::new();
    loop {
        ring.submit_and_wait(1)?;
        done.clear();
        done.extend(ring.completion().map(|c: io_uring::cqueue::Entry| (c.user_data(), c.result())));
        for &(data, res) in &done {
            match data & 3 {
                ACCEPT => {
                    if res >= 0 {
                        let fd = accepted(res)?;
                        let i = conns.len();
                        if fixed {
                            ring.submitter().register_files_update(i as u32, &[fd])?;
                        }
                        let mut c = Conn { fd, buf: vec![0u8; BUF], out: Vec::with_capacity(BUF) };
                        let e = recv(&mut c, i);
                        conns.push(Some(c));
                        unsafe { ring.submission().push(&e).unwrap() };
                    }
                    unsafe { ring.submission().push(&accept).unwrap() };
                }
                RECV => {
                    let i = (data >> 2) as usize;
                    if res <= 0 {
                        close(&mut conns, i);
                        continue;
                    }
                    let c = conns[i].as_mut().unwrap();
                    let (buf, out) = (&c.buf, &mut c.out);
                    answers(&buf[..res as usize], out);
                    let send = if fixed {
                        opcode::Send::new(types::Fixed(i as u32), c.out.as_ptr(), c.out.len() as u32)
                    } else {
                        opcode::Send::new(types::Fd(c.fd), c.out.as_ptr(), c.out.len() as u32)
                    }
                    .build()
                    .flags(squeue::Flags::IO_LINK | squeue::Flags::SKIP_SUCCESS)
                    .user_data((i as u64) << 2 | SEND);
                    let next = recv(c, i);
                    unsafe {
                        let mut sq = ring.submission();
                        sq.push(&send).unwrap();
                        sq.push(&next).unwrap();
                    }
                }
                _ => {
                    // A send failed (SKIP_SUCCESS hides the rest): its linked recv is cancelled.
                    let i = (data >> 2) as usize;
                    close(&mut conns, i);
                }
            }
        }
    }
}

/// io_uring with one multishot recv per connection reading into a ring of provided buffers
/// (no recv re-armed per request), each answer's send submitted with the others of its wake.
fn uring_multi(port: u16) -> std::io::Result<()> {
    use io_uring::{cqueue, opcode, squeue, types, IoUring};
    const ENTRIES: u16 = 1024;
    const BSZ: usize = 2048;
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    let lfd = listener.as_raw_fd();
    let mut ring = IoUring::builder().setup_single_issuer().setup_coop_taskrun().build(1024)?;
    let ring_layout = std::alloc::Layout::from_size_align(ENTRIES as usize * 16, 4096).unwrap();
    let bufs = unsafe { std::alloc::alloc_zeroed(ring_layout) } as *mut types::BufRingEntry;
    let mut pool = vec![0u8; ENTRIES as usize * BSZ];
    let pool_base = pool.as_mut_ptr();
    for i in 0..ENTRIES {
        let e = unsafe { &mut *bufs.add(i as usize) };
        e.set_addr(pool_base as u64 + i as u64 * BSZ as u64);
        e.set_len(BSZ as u32);
        e.set_bid(i);
    }
    let tail_ptr = unsafe { types::BufRingEntry::tail(bufs) } as *const std::sync::atomic::AtomicU16;
    let mut tail: u16 = ENTRIES;
    unsafe { (*tail_ptr).store(tail, std::sync::atomic::Ordering::Release) };
    unsafe { ring.submitter().register_buf_ring_with_flags(bufs as u64, ENTRIES, 0, 0)? };
    let mut conns: Vec<Option<Conn>> = Vec::new();
    let accept = opcode::Accept::new(types::Fd(lfd), std::ptr::null_mut(), std::ptr::null_mut()).build().user_data(ACCEPT);
    unsafe { ring.submission().push(&accept).unwrap() };
    let recv = |fd: RawFd, i: usize| opcode::RecvMulti::new(types::Fd(fd), 0).build().user_data((i as u64) << 2 | RECV);
    let mut done: Vec<(u64, i32, u32)> = Vec::new();
    loop {
        ring.submit_and_wait(1)?;
        done.clear();
        done.extend(ring.completion().map(|c: cqueue::Entry| (c.user_data(), c.result(), c.flags())));
        for &(data, res, flags) in &done {
            match data & 3 {
                ACCEPT => {
                    if res >= 0 {
                        let fd = accepted(res)?;
                        let i = conns.len();
                        conns.push(Some(Conn { fd, buf: Vec::new(), out: Vec::with_capacity(BSZ) }));
                        unsafe { ring.submission().push(&recv(fd, i)).unwrap() };
                    }
                    unsafe { ring.submission().push(&accept).unwrap() };
                }
                RECV => {
                    let i = (data >> 2) as usize;
                    if res == 0 || (res < 0 && res != -libc::ENOBUFS) {
                        close(&mut conns, i);
                        continue;
                    }
                    let Some(c) = conns[i].as_mut() else { continue };
                    if res > 0 {
                        let bid = cqueue::buffer_select(flags).expect("a provided buffer");
                        let data = unsafe { std::slice::from_raw_parts(pool_base.add(bid as usize * BSZ), res as usize) };
                        answers(data, &mut c.out);
                        let send = opcode::Send::new(types::Fd(c.fd), c.out.as_ptr(), c.out.len() as u32)
                            .build()
                            .flags(squeue::Flags::SKIP_SUCCESS)
                            .user_data((i as u64) << 2 | SEND);
                        unsafe { ring.submission().push(&send).unwrap() };
                        // The buffer goes back to the ring.
                        let e = unsafe { &mut *bufs.add((tail & (ENTRIES - 1)) as usize) };
                        e.set_addr(pool_base as u64 + bid as u64 * BSZ as u64);
                        e.set_len(BSZ as u32);
                        e.set_bid(bid);
                        tail = tail.wrapping_add(1);
                    }
                    if !cqueue::more(flags) {
                        unsafe { ring.submission().push(&recv(c.fd, i)).unwrap() };
                    }
                }
                _ => {
                    let i = (data >> 2) as usize;
                    close(&mut conns, i);
                }
            }
        }
        unsafe { (*tail_ptr).store(tail, std::sync::atomic::Ordering::Release) };
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(2).map_or(7400, |p| p.parse().unwrap());
    match args.get(1).map(String::as_str) {
        Some("epoll") => epoll(port),
        Some("uring") => uring(port, false),
        Some("uring-fixed") => uring(port, true),
        Some("uring-multi") => uring_multi(port),
        _ => {
            eprintln!("usage: uproto epoll|uring|uring-fixed [port]");
            std::process::exit(2)
        }
    }
}
