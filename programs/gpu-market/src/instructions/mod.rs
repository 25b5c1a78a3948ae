pub mod init_market;
pub mod stake;
pub mod unstake;

pub use init_market::*;
pub use stake::*;
pub use unstake::*;
