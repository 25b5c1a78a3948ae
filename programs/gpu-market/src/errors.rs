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
    #[msg("the amount must be greater than zero")]
    ZeroAmount,
    #[msg("the stake is smaller than the amount asked back")]
    InsufficientStake,
    #[msg("nothing is waiting to be withdrawn")]
    NothingToWithdraw,
    #[msg("the unstake cooldown is not over")]
    CooldownNotOver,
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
