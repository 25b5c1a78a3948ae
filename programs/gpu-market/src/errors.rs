use anchor_lang::prelude::*;
use gpu_market_core::MathError;

#[error_code]
pub enum MarketError {
    #[msg("score weights must add up to 10000 bps")]
    InvalidWeights,
    #[msg("the billing interval must be at least one second")]
    InvalidBillingInterval,
    #[msg("the protocol fee must be at most 10000 bps")]
    InvalidFee,
    #[msg("the score bounds must be greater than zero")]
    InvalidScoreBounds,
    #[msg("the anti-monopoly cap must be between 1 and 10000 bps")]
    InvalidClientCap,
    #[msg("pricing needs a base price above zero, seasonal factors above zero and smoothing of at most 10000 bps")]
    InvalidPricing,
    #[msg("the GPU class is not in the market's table")]
    UnknownGpuClass,
    #[msg("only the market's authority may do this")]
    NotMarketAuthority,
    #[msg("the amount must be greater than zero")]
    ZeroAmount,
    #[msg("the stake is smaller than the amount asked back")]
    InsufficientStake,
    #[msg("nothing is waiting to be withdrawn")]
    NothingToWithdraw,
    #[msg("the unstake cooldown is not over")]
    CooldownNotOver,
    #[msg("a machine has 1 to 16 GPUs")]
    BadGpuCount,
    #[msg("a GPU's memory must be at least 1 GiB")]
    BadGpuMemory,
    #[msg("an overclock range has its minimum above its maximum, or a zero power limit")]
    BadOverclockRange,
    #[msg("a machine advertises at most 8 cached images")]
    TooManyCachedImages,
    #[msg("the machine is retired")]
    MachineRetired,
    #[msg("the signer is not the machine's agent key")]
    WrongAgent,
    #[msg("arithmetic overflow")]
    Overflow,
    #[msg("division by zero")]
    DivisionByZero,
}

impl From<MathError> for MarketError {
    fn from(e: MathError) -> Self {
        match e {
            MathError::Overflow => MarketError::Overflow,
            MathError::DivisionByZero => MarketError::DivisionByZero,
        }
    }
}
