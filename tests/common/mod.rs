//! Shared test support: an in-memory database for query tests (`db`),
//! a real TSD on a loopback port for protocol tests (`server`) and the
//! `tsdb` binary for command-line tests (`cli`), and `tsdb tsd` as a child
//! process for tests that kill it (`child`), and the embedded/cluster
//! pair of TSDs the TSD tests run on (`backend`).
#![allow(dead_code, unused_imports)]

pub mod backend;
pub mod child;
pub mod cli;
pub mod cluster;
pub mod db;
pub mod server;

pub use backend::*;
pub use child::*;
pub use cli::*;
pub use cluster::*;
pub use db::*;
pub use server::*;
