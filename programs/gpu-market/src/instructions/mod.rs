pub mod init_market;
pub mod stake;

pub use init_market::*;
pub use stake::*;
