pub mod book;
pub mod market;
pub mod seeds;
pub mod stake;

pub use book::*;
pub use market::*;
pub use stake::*;
