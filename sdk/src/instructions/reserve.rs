//! `reserve`, `reserve_gang` and `unreserve`: machines' reservations for a queue bid (EASY
//! backfilling).
//! Anyone may send them; only the fee payer signs.

use gpu_market::pda;
use gpu_market::state::{Lease, Machine};
use solana_instruction::{AccountMeta, Instruction};
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use super::{ix, ClientInstruction};

/// `reserve`: holds `machine`'s GPUs for queue bid `bid` from the earliest time it fits there.
pub struct Reserve {
    pub market: Pubkey,
    pub machine: Pubkey,
    /// The market's queue book.
    pub book: Pubkey,
    pub bid: Pubkey,
    /// The machine the bid is reserved on now, when that is another one (`Bid::reserved_on`).
    pub previous: Option<Pubkey>,
    /// Every lease running on `machine`.
    pub leases: Vec<Pubkey>,
    /// For each queue entry ranked above `bid` that could run on `machine` once it is empty: a
    /// machine whose reservation holds it.
    pub holding: Vec<Pubkey>,
}

impl Reserve {
    /// `reserve` of `bid` (whose account says where it is reserved now) on `machine`, whose
    /// running leases are `leases` (of the market's, those on it are taken).
    pub fn of(
        market: Pubkey,
        book: Pubkey,
        (machine, bid): (Pubkey, Pubkey),
        reserved_on: Pubkey,
        leases: &[(Pubkey, Lease)],
        holding: Vec<Pubkey>,
    ) -> Reserve {
        let previous =
            (reserved_on != Pubkey::default() && reserved_on != machine).then_some(reserved_on);
        Reserve {
            market,
            machine,
            book,
            bid,
            previous,
            leases: leases
                .iter()
                .filter(|(_, l)| l.machine == machine)
                .map(|(k, _)| *k)
                .collect(),
            holding,
        }
    }
}

impl ClientInstruction for Reserve {
    const NAME: &'static str = "reserve";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::Reserve {
                market: self.market,
                machine: self.machine,
                queue_book: self.book,
                bid: self.bid,
                previous: self.previous,
            },
            gpu_market::instruction::Reserve {},
        );
        i.accounts.extend(
            self.leases
                .iter()
                .chain(&self.holding)
                .map(|k| AccountMeta::new_readonly(*k, false)),
        );
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        Vec::new()
    }
}

/// `reserve_gang`: holds GPUs on each of `parts` for gang bid `bid`, all from the time every
/// part fits.
pub struct ReserveGang {
    pub market: Pubkey,
    /// The market's queue book.
    pub book: Pubkey,
    pub bid: Pubkey,
    /// For each part, in order: its machine and every lease running on it.
    pub parts: Vec<(Pubkey, Vec<Pubkey>)>,
    /// For each queue entry ranked above `bid` that could run on one of the parts' machines
    /// once it is empty, a machine whose reservation holds it; and the machine the gang is
    /// reserved on now (`Bid::reserved_on`), where that is none of the parts.
    pub shown: Vec<Pubkey>,
}

impl ReserveGang {
    /// `reserve_gang` of `bid` (whose account says where it is reserved now) on machines
    /// `parts`, whose running leases are among `leases` (the market's: their addresses follow
    /// from their bids), with `holding` the machines holding entries ranked above it.
    pub fn of(
        market: Pubkey,
        book: Pubkey,
        bid: Pubkey,
        reserved_on: Pubkey,
        (parts, leases): (&[Pubkey], &[Lease]),
        holding: Vec<Pubkey>,
    ) -> ReserveGang {
        let mut shown = holding;
        shown.retain(|k| !parts.contains(k));
        if reserved_on != Pubkey::default()
            && !parts.contains(&reserved_on)
            && !shown.contains(&reserved_on)
        {
            shown.push(reserved_on);
        }
        ReserveGang {
            market,
            book,
            bid,
            parts: parts
                .iter()
                .map(|m| {
                    let on = leases.iter().filter(|l| l.machine == *m);
                    (*m, on.map(lease_address).collect())
                })
                .collect(),
            shown,
        }
    }
}

impl ClientInstruction for ReserveGang {
    const NAME: &'static str = "reserve_gang";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::ReserveGang {
                market: self.market,
                queue_book: self.book,
                bid: self.bid,
            },
            gpu_market::instruction::ReserveGang {},
        );
        for (machine, leases) in &self.parts {
            i.accounts.push(AccountMeta::new(*machine, false));
            i.accounts
                .extend(leases.iter().map(|k| AccountMeta::new_readonly(*k, false)));
        }
        i.accounts.extend(
            self.shown
                .iter()
                .map(|k| AccountMeta::new_readonly(*k, false)),
        );
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        Vec::new()
    }
}

/// The address of `lease`: its bid's lease, or its part's of a gang's.
pub fn lease_address(lease: &Lease) -> Pubkey {
    match lease.parts > 1 {
        true => pda::gang_lease(&lease.bid, lease.part).0,
        false => pda::lease(&lease.bid).0,
    }
}

/// `unreserve`: clears `machine`'s reservation once it holds nothing.
pub struct Unreserve {
    pub market: Pubkey,
    pub machine: Pubkey,
    /// The reservation's bid (`Machine::reservation`).
    pub bid: Pubkey,
}

impl Unreserve {
    pub fn of(market: Pubkey, (key, machine): (Pubkey, &Machine)) -> Unreserve {
        Unreserve {
            market,
            machine: key,
            bid: machine.reservation.bid,
        }
    }
}

impl ClientInstruction for Unreserve {
    const NAME: &'static str = "unreserve";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Unreserve {
                market: self.market,
                machine: self.machine,
                bid: self.bid,
            },
            gpu_market::instruction::Unreserve {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        Vec::new()
    }
}
