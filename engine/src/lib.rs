//! KeyMesh's engine: a multithreaded, Redis-protocol, multi-master cache.
//!
//! A request travels `connection` (buffered socket I/O) → `parse` (RESP requests) → `cmd`
//! (the command table, one module per family) → `db` (the sharded, versioned keyspace) →
//! `frame` (RESP2/RESP3 replies). `server` owns the listeners and shared state.

pub mod admin;
pub mod auth;
pub mod blocking;
pub mod client;
pub mod clock;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod db;
pub mod error;
pub mod errorstats;
pub mod frame;
pub mod geohash;
pub mod glob;
pub mod handoff;
pub mod hlc;
pub mod hll;
pub mod http;
pub mod kernel;
pub mod latency;
pub mod memory;
pub mod mesh;
pub mod mesh_host;
pub mod metrics;
pub mod monitor;
pub mod notify;
pub mod parse;
pub mod pause;
pub mod persist;
pub mod pubsub;
pub mod repl;
pub mod script;
pub mod server;
pub mod slowlog;
pub mod tally;
pub mod tls;
pub mod tracking;
