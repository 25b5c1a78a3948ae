//! The host agent: the daemon a host operator runs on each GPU server.

pub mod docker;
