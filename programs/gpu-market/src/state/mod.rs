pub mod market;
pub mod seeds;
pub mod stake;

pub use market::*;
pub use stake::*;
