//! Shared test support: an in-memory database for query tests (`db`) and
//! a real TSD on a loopback port for protocol tests (`server`).
#![allow(dead_code, unused_imports)]

pub mod db;
pub mod server;

pub use db::*;
pub use server::*;
