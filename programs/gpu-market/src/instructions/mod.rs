pub mod bid;
pub mod book;
pub mod init_market;
pub mod machine;
pub mod stake;
pub mod unstake;

pub use bid::*;
pub use book::*;
pub use init_market::*;
pub use machine::*;
pub use stake::*;
pub use unstake::*;
