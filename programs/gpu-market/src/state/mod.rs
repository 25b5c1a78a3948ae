pub mod bid;
pub mod book;
pub mod lease;
pub mod machine;
pub mod market;
pub mod seeds;
pub mod stake;

pub use bid::*;
pub use book::*;
pub use lease::*;
pub use machine::*;
pub use market::*;
pub use stake::*;
