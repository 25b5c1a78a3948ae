use anchor_lang::prelude::*;
use gpu_market_core::MathError;

#[error_code]
pub enum MarketError {
    #[msg("score weights must add up to 10000 bps")]
    InvalidWeights,
    #[msg("the billing interval must be 1 to 3600 seconds")]
    InvalidBillingInterval,
    #[msg("the protocol fee must be at most 1000 bps")]
    InvalidFee,
    #[msg("the score bounds and the urgency premium share must be greater than zero, the aging cap at most 10000 bps")]
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
    #[msg("the book is full")]
    BookFull,
    #[msg("the bid is already in the book")]
    BookDuplicate,
    #[msg("the bid is not in the book")]
    BookNotFound,
    #[msg("the book account does not belong to this market or machine")]
    WrongBook,
    #[msg("the book is already open")]
    BookAlreadyOpen,
    #[msg("a bid accepts at least one GPU class of the market")]
    NoGpuClass,
    #[msg("the deadline leaves less time than the shortest run the bid accepts")]
    DeadlineTooSoon,
    #[msg("the power limit is mandatory")]
    PowerLimitMissing,
    #[msg("no GPU of the machine allows the bid's overclock terms")]
    OverclockOutOfRange,
    #[msg("the machine is not active")]
    MachineNotActive,
    #[msg("the image reference is longer than 255 bytes")]
    ImageRefTooLong,
    #[msg("the bid is running; end its lease instead")]
    BidRunning,
    #[msg("the stake account is not the bidder's stake in this market")]
    WrongStakeAccount,
    #[msg("the stake ranks waiting bids: cancel them (or let them run) before unstaking")]
    StakeLockedByBids,
    #[msg("idle windows and the slash evidence must be at least 1, the idle end 0 or more than the idle windows, silence at least 2 intervals; utilisation at most 10000 bps, a slash at most 5000 bps")]
    InvalidEnforcement,
    #[msg("two GPUs of the machine have the same UUID")]
    DuplicateGpu,
    #[msg("the GPU index is not one of the machine's GPUs")]
    UnknownGpu,
    #[msg("a bid gives one set of overclock terms, or one per GPU")]
    BadOverclockCount,
    #[msg("a chosen GPU cannot serve the bid (class, free memory, overclock range or price)")]
    GpuCannotServe,
    #[msg("the bid fits inside one topology group: choose GPUs of one group")]
    TopologySplit,
    #[msg("the client would hold more than the market's anti-monopoly cap")]
    ClientCapReached,
    #[msg(
        "the bid's latest start has passed (its deadline less the shortest run its client accepts)"
    )]
    LatestStartPassed,
    #[msg("pass the client stake of each book entry ranked above that fits, and the bid account of each entry its summary cannot decide")]
    CandidatesMissing,
    #[msg("a bid ranked above the chosen one is feasible on this machine")]
    BetterBidFeasible,
    #[msg("the bid does not fit this machine now")]
    BidNotFeasible,
    #[msg("only a spot lease can be preempted")]
    NotSpotLease,
    #[msg("the lease is already stopping")]
    LeaseStopping,
    #[msg("the challenger does not pay the host more than the running spot bid")]
    NotBetterBid,
    #[msg("the proof's interval is not after the last proven one")]
    StaleInterval,
    #[msg("submit_usage takes one writable lease of the machine per proof, in the proofs' order")]
    ProofAccountsMismatch,
    #[msg("the proof's interval has not ended yet")]
    IntervalNotOver,
    #[msg("the lease had stopped before the proof's interval")]
    IntervalAfterStop,
    #[msg("a proof gives one peak power per GPU of the lease")]
    BadProofGpuCount,
    #[msg("only the lease's client or host may end it before all of its time is proven")]
    NotLeaseParty,
    #[msg("the host has not been silent long enough to reclaim the escrow")]
    HostNotSilent,
    #[msg("the lease's time is fully proven: end it instead")]
    NothingToReclaim,
    #[msg("not enough missed intervals or power violations to slash")]
    NoSlashingEvidence,
    #[msg("the host's stake in the market is below the minimum to register a machine")]
    HostStakeTooLow,
    #[msg("the stake backs the owner's machines (each its bond, the min_host_stake it was registered under): close a machine, once its leases are settled, to unbond its part")]
    HostStakeBonded,
    #[msg("the machine has running leases")]
    MachineBusy,
    #[msg("arithmetic overflow")]
    Overflow,
    #[msg("division by zero")]
    DivisionByZero,
    #[msg("too few of the machine's GPUs are of a class the bid accepts")]
    NoGpuOfClass,
    #[msg("too few of the machine's GPUs have the memory the bid asks per GPU")]
    NotEnoughGpuMemory,
    #[msg("the price is below the host's floor")]
    PriceBelowFloor,
    #[msg("the price is below the market's reserve price of the classes the bid accepts")]
    PriceBelowReserve,
    #[msg("running leases hold the GPUs the bid needs")]
    GpusBusy,
    #[msg("the bid's latest start has not passed (and it is not a spot bid of a retired machine)")]
    BidNotExpired,
    #[msg("the book is full: pass its lowest-ranked bid, that bid's client, token account and stake to evict it")]
    EvictionMissing,
    #[msg("the book is full and the bid does not outrank its lowest-ranked entry")]
    BookFullOfBetterBids,
    #[msg("the unstake cooldown must be at most 30 days")]
    InvalidCooldown,
    #[msg("no parameter change is scheduled, or its notice period is not over")]
    NoUpdateDue,
    #[msg("the host's stake account is missing, or is the client's own")]
    HostStakeMissing,
    #[msg("the stake account still holds stake, waiting bids or GPUs")]
    StakeNotEmpty,
    #[msg("only a retired machine can be closed")]
    MachineNotRetired,
    #[msg("the book still holds bids")]
    BookNotEmpty,
    #[msg("the bid's latest start lets it wait longer than the market allows (its aging cap, and 7 days at most)")]
    DeadlineTooFar,
    #[msg("a market's mints must have no freeze authority")]
    MintCanFreeze,
    #[msg("no refund is due to this stake account")]
    NothingToClaim,
    #[msg("the stake account holds refunds due: claim them (claim_refunds) before closing it")]
    RefundsDue,
    #[msg("the bid has no environment (its env_hash is zero)")]
    NoEnvironment,
    #[msg("a sealed environment is 1 to 800 bytes")]
    SealedEnvSize,
    #[msg("only the bid's client may close its sealed environment while the bid lives")]
    SealedEnvInUse,
    #[msg("a bid publishes at most 4 ports, each 1 to 65535 and named once")]
    BadPorts,
    #[msg("the machine gives fewer ports or less scratch per lease, or fewer CPU cores or less memory to its leases, than the bid asks")]
    NoRoom,
    #[msg("the machine's network: an ASCII host name of at most 64 bytes (required with ports or an API port), at most 4 allow-list entries with egress by allow-list only, prefixes of at most 32 bits")]
    BadNetwork,
    #[msg("the machine's region is not one the bid accepts")]
    RegionNotAccepted,
    #[msg("a bid names at most 4 regions, each a non-empty label named once")]
    BadRegions,
    #[msg("auto power's throughput tolerance is at most 2,000 bps (20 %)")]
    BadAutoPower,
    #[msg("the machine has no such GPU")]
    NoSuchGpu,
    #[msg("a bid runs at least one billing interval")]
    BidShorterThanInterval,
    #[msg("the machine passed is not the bid's")]
    WrongMachine,
    #[msg("the region is not one the market lists (market add-region)")]
    UnknownRegion,
    #[msg("the market lists this region already")]
    RegionListed,
    #[msg("the market lists 32 regions, the most it can")]
    RegionTableFull,
    #[msg("a bid's GPUs ask at most 2 distinct sets of overclock terms")]
    TooManyTermSets,
    #[msg("a preempted spot bid that may wait again goes back to its machine's spot book: pass the book (settling cannot choose a refund instead)")]
    SpotBookMissing,
    #[msg("spot bids wait on this machine, ranked by the host's profit at its current electricity cost: the cost can change once its spot book is empty (pause the machine; waiting spot bids run or expire), and the update must pass the book")]
    SpotBidsWaiting,
    #[msg("the book account is not a whole number of entry slots")]
    BookMisshapen,
    #[msg("the bid account does not hold the rent of its place in the book")]
    BookRentMissing,
    #[msg("the machine's pay is not claimed yet: send claim_pay first")]
    PayUnclaimed,
    #[msg("a proof covers at least one interval")]
    EmptyProofSpan,
    #[msg("the shortest run the bid accepts is longer than its duration")]
    MinDurationTooLong,
    #[msg(
        "pass the market's queue book: the bid of a lease whose host went silent goes back into it"
    )]
    QueueBookMissing,
    #[msg("a bid waiting in the queue could run on the lease's GPUs once it ends: an extension would pass it")]
    GpusWanted,
    #[msg("only a queue bid ranks by its score")]
    NotQueueBid,
    #[msg("the premium would not rank the bid higher (its urgency part is full, or its client's stake fell)")]
    NoHigherRank,
    #[msg("the machine's GPUs are reserved for a bid from a time this lease would run past: it may use only the other GPUs, and leave the reserved bid its CPU and memory")]
    GpusReserved,
    #[msg("pass every lease running on the machine (and only program accounts): the reservation's start is computed from their ends")]
    LeasesMissing,
    #[msg("the bid fits the machine now: allocate it instead")]
    BidFitsNow,
    #[msg("a bid ranked above this one could run on the machine once it is empty and no machine holds it: reserve that one first")]
    BetterBidUnreserved,
    #[msg("the reservation still holds: its bid waits for it, and it has not lapsed (or the new start is not earlier)")]
    ReservationHolds,
    #[msg("the account is not the reservation's bid, or the machine holds no reservation")]
    NotReservedBid,
    #[msg("a gang bid runs on 2 to 8 machines (parts), and an ordinary bid on 1")]
    BadGangParts,
    #[msg("gang bids are queue bids: a spot bid names one machine")]
    GangSpotBid,
    #[msg("the bid is a gang's: allocate_gang starts all its parts at once")]
    GangNeedsAllocateGang,
    #[msg("allocate_gang and reserve_gang take a gang bid")]
    NotAGang,
    #[msg("pass one machine and its part's lease account for each of the gang's parts, each machine once, and GPUs for each part")]
    GangPartsMismatch,
    #[msg("the machine's agent has not sent a heartbeat within the market's silence window: no part of a gang may start there")]
    MachineSilent,
    #[msg("the signer is the agent of none of the gang's machines")]
    GangAgentMissing,
    #[msg("a gang's parts are extended together: not one lease of it")]
    GangPartExtend,
    #[msg("the gang's rendezvous port is set already")]
    RendezvousSet,
    #[msg("a gang bid publishes at least one port: its first is where the other parts reach the first part")]
    GangNeedsPort,
    #[msg("the bid is a gang's: reserve_gang holds all its machines at once")]
    GangNeedsReserveGang,
    #[msg("a GPU class name is 1 to 16 printable ASCII bytes (spaces inside only), zero-padded")]
    BadGpuClassName,
    #[msg("the GPU class has a name already: a class keeps its name for the life of the market")]
    GpuClassNamed,
    #[msg("another GPU class of the market has this name (names are compared without case)")]
    GpuClassNameTaken,
}

impl From<gpu_market_core::fit::Unfit> for MarketError {
    fn from(e: gpu_market_core::fit::Unfit) -> Self {
        use gpu_market_core::fit::Unfit;
        match e {
            Unfit::MachineInactive => MarketError::MachineNotActive,
            Unfit::Expired => MarketError::LatestStartPassed,
            Unfit::RegionNotAccepted => MarketError::RegionNotAccepted,
            Unfit::NoRoom => MarketError::NoRoom,
            Unfit::NoAcceptedClass => MarketError::NoGpuOfClass,
            Unfit::TooLittleMemory => MarketError::NotEnoughGpuMemory,
            Unfit::OverclockOutOfRange => MarketError::OverclockOutOfRange,
            Unfit::PriceBelowFloor => MarketError::PriceBelowFloor,
            Unfit::PriceBelowReserve => MarketError::PriceBelowReserve,
            Unfit::Busy => MarketError::GpusBusy,
        }
    }
}

impl From<gpu_market_core::fit::ChoiceError> for MarketError {
    fn from(e: gpu_market_core::fit::ChoiceError) -> Self {
        use gpu_market_core::fit::ChoiceError;
        use gpu_market_core::matching::AssignError;
        match e {
            ChoiceError::Unfit(u) => u.into(),
            ChoiceError::Assign(AssignError::Count) => MarketError::BadGpuCount,
            ChoiceError::Assign(AssignError::Unknown(_)) => MarketError::UnknownGpu,
            ChoiceError::Assign(AssignError::Duplicate(_)) => MarketError::DuplicateGpu,
            ChoiceError::Assign(AssignError::Incompatible(_)) => MarketError::GpuCannotServe,
            ChoiceError::TopologySplit => MarketError::TopologySplit,
        }
    }
}

impl From<crate::state::BookError> for MarketError {
    fn from(e: crate::state::BookError) -> Self {
        match e {
            crate::state::BookError::Full => MarketError::BookFull,
            crate::state::BookError::Duplicate => MarketError::BookDuplicate,
            crate::state::BookError::NotFound => MarketError::BookNotFound,
            crate::state::BookError::NoSlot => MarketError::BookMisshapen,
        }
    }
}

impl From<MathError> for MarketError {
    fn from(e: MathError) -> Self {
        match e {
            MathError::Overflow => MarketError::Overflow,
            MathError::DivisionByZero => MarketError::DivisionByZero,
        }
    }
}
