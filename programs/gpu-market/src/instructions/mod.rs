pub mod init_market;
pub mod machine;
pub mod stake;
pub mod unstake;

pub use init_market::*;
pub use machine::*;
pub use stake::*;
pub use unstake::*;
