//! The builders of a lease's life: `allocate` starts it, `preempt` stops a spot lease for a
//! better bid, `submit_usage` proves a machine's leases and `claim_pay` pays the host, `end_lease` / `reclaim_escrow` settle it, and
//! `slash` spends the evidence a machine gathered.

use gpu_market::instructions::{AllocateArgs, AllocateGangArgs, UsageProofArgs, WalkBookArgs};
use gpu_market::pda;
use gpu_market::state::{BidKind, Lease, Machine, Market};
use solana_instruction::{AccountMeta, Instruction};
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use super::{ix, ClientInstruction};

/// `allocate`'s and `allocate_gang`'s remaining accounts after their own: the evidence the book
/// cannot show by itself, read-only.
fn with_evidence(i: &mut Instruction, evidence: &[Pubkey]) {
    i.accounts.extend(
        evidence
            .iter()
            .map(|k| AccountMeta::new_readonly(*k, false)),
    );
}

pub struct Allocate<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub book: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub gpus: Vec<u8>,
    /// What the book cannot show by itself (`crate::book::allocate_evidence`): client stakes
    /// and undecidable bids. Empty in the common case, whatever the book's depth.
    pub evidence: Vec<Pubkey>,
}

impl Allocate<'_> {
    pub fn lease(&self) -> Pubkey {
        pda::lease(&self.bid).0
    }
}

impl ClientInstruction for Allocate<'_> {
    const NAME: &'static str = "allocate";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::Allocate {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                book: self.book,
                bid: self.bid,
                lease: self.lease(),
                client_stake: pda::stake(&self.market, &self.client).0,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::Allocate {
                args: AllocateArgs {
                    gpus: self.gpus.clone(),
                },
            },
        );
        with_evidence(&mut i, &self.evidence);
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// Entries a `walk_book` transaction judges, as the agent sends it at first: about 1.1M compute
/// units at the costliest entries measured on a busy 8-GPU machine
/// (`tests/tests/allocate/walk.rs`).
pub const WALK_ENTRIES: u16 = 1_536;

/// `walk_book`: the machine's agent judges up to `entries` more of `book`'s entries against its
/// machine, so that `allocate` below a book too deep to judge in one transaction judges only
/// what the walk did not.
pub struct WalkBook<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub book: Pubkey,
    pub entries: u16,
}

impl ClientInstruction for WalkBook<'_> {
    const NAME: &'static str = "walk_book";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::WalkBook {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                book: self.book,
            },
            gpu_market::instruction::WalkBook {
                args: WalkBookArgs {
                    entries: self.entries,
                },
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// `allocate_gang`: every part of a gang bid at once, each on its own machine; the agent of one
/// of them sends it.
pub struct AllocateGang<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub book: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    /// Each part's machine and the machine GPUs that serve it, in the gang's order.
    pub parts: Vec<(Pubkey, Vec<u8>)>,
    /// Client stakes of the entries above the gang that fit one of its machines
    /// (`crate::book::BookEntries::allocate_evidence`).
    pub evidence: Vec<Pubkey>,
}

impl AllocateGang<'_> {
    /// Each part's lease, in the gang's order.
    pub fn leases(&self) -> Vec<Pubkey> {
        (0..self.parts.len())
            .map(|p| pda::gang_lease(&self.bid, p as u8).0)
            .collect()
    }
}

impl ClientInstruction for AllocateGang<'_> {
    const NAME: &'static str = "allocate_gang";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::AllocateGang {
                agent: self.agent.pubkey(),
                market: self.market,
                book: self.book,
                bid: self.bid,
                client_stake: pda::stake(&self.market, &self.client).0,
                system_program: solana_system_interface::program::ID,
            },
            gpu_market::instruction::AllocateGang {
                args: AllocateGangArgs {
                    gpus: self.parts.iter().map(|(_, g)| g.clone()).collect(),
                },
            },
        );
        for ((machine, _), lease) in self.parts.iter().zip(self.leases()) {
            i.accounts.push(AccountMeta::new(*machine, false));
            i.accounts.push(AccountMeta::new(lease, false));
        }
        with_evidence(&mut i, &self.evidence);
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// `set_rendezvous`: the agent of a gang's first part records the host port of the bid's first
/// published port.
pub struct SetRendezvous<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub port: u16,
}

impl ClientInstruction for SetRendezvous<'_> {
    const NAME: &'static str = "set_rendezvous";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::SetRendezvous {
                agent: self.agent.pubkey(),
                machine: self.machine,
                lease: self.lease,
            },
            gpu_market::instruction::SetRendezvous { port: self.port },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

pub struct Preempt<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub lease_bid: Pubkey,
    pub challenger: Pubkey,
    pub challenger_client: Pubkey,
}

impl ClientInstruction for Preempt<'_> {
    const NAME: &'static str = "preempt";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Preempt {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
                lease: self.lease,
                lease_bid: self.lease_bid,
                challenger: self.challenger,
                challenger_stake: pda::stake(&self.market, &self.challenger_client).0,
            },
            gpu_market::instruction::Preempt {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// `submit_usage`: proofs of one machine's leases in one transaction, each `(lease, proof)`
/// proving one interval or more (`intervals`; a lease may come several times, its intervals
/// in order).
pub struct SubmitUsage<'a> {
    pub agent: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub proofs: Vec<(Pubkey, UsageProofArgs)>,
}

impl ClientInstruction for SubmitUsage<'_> {
    const NAME: &'static str = "submit_usage";

    fn instruction(&self) -> Instruction {
        let mut i = ix(
            gpu_market::accounts::SubmitUsage {
                agent: self.agent.pubkey(),
                market: self.market,
                machine: self.machine,
            },
            gpu_market::instruction::SubmitUsage {
                proofs: self.proofs.iter().map(|(_, p)| p.clone()).collect(),
            },
        );
        i.accounts.extend(
            self.proofs
                .iter()
                .map(|(lease, _)| AccountMeta::new(*lease, false)),
        );
        i
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.agent]
    }
}

/// The most bytes a transaction takes on the wire (`PACKET_DATA_SIZE` of the cluster).
pub const TRANSACTION_SIZE_LIMIT: usize = 1232;

impl<'a> SubmitUsage<'a> {
    /// The proofs split, in order, into as few `submit_usage`s as fit a transaction each:
    /// signed by the agent alone (which pays its fee) beside a compute-unit limit and price.
    /// A lease's proofs stay in order across the parts.
    pub fn split(self) -> Vec<SubmitUsage<'a>> {
        let mut parts: Vec<SubmitUsage<'a>> = Vec::new();
        for proof in self.proofs {
            let fits = parts.last_mut().is_some_and(|last| {
                last.proofs.push(proof.clone());
                let fits = last.transaction_size() <= TRANSACTION_SIZE_LIMIT;
                if !fits {
                    last.proofs.pop();
                }
                fits
            });
            if !fits {
                parts.push(SubmitUsage {
                    agent: self.agent,
                    market: self.market,
                    machine: self.machine,
                    proofs: vec![proof],
                });
            }
        }
        parts
    }

    /// Bytes of the signed transaction that sends this with a compute-unit limit and price.
    pub fn transaction_size(&self) -> usize {
        use solana_compute_budget_interface::ComputeBudgetInstruction;
        let ixs = [
            ComputeBudgetInstruction::set_compute_unit_limit(0),
            ComputeBudgetInstruction::set_compute_unit_price(0),
            self.instruction(),
        ];
        crate::budget::transaction_size(&ixs, &self.agent.pubkey())
    }
}

/// `claim_pay`: pays a machine's owner what its proofs accrued. It needs no signature but the
/// fee payer's: anyone may send it.
pub struct ClaimPay {
    pub market: Pubkey,
    pub machine: Pubkey,
    pub payment_mint: Pubkey,
    /// A payment-token account of the machine's owner.
    pub host_tokens: Pubkey,
}

impl ClientInstruction for ClaimPay {
    const NAME: &'static str = "claim_pay";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::ClaimPay {
                market: self.market,
                machine: self.machine,
                payment_mint: self.payment_mint,
                payment_vault: pda::payment_vault(&self.market).0,
                host_tokens: self.host_tokens,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::ClaimPay {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        Vec::new()
    }
}

/// `end_lease` (or, with `reclaim`, `reclaim_escrow`): the final settlement of a lease. A
/// reclaimed queue lease's bid goes back to the queue (failover) unless its client sends the
/// reclaim with `refund`.
pub struct CloseLease<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub lease: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub agent: Pubkey,
    /// The machine's owner: `reclaim_escrow` slashes its stake for the silence it proves.
    pub host: Pubkey,
    /// The machine's spot book, for a preempted spot bid that goes back into it.
    pub spot_book: Option<Pubkey>,
    /// The market's queue book, for a reclaimed queue lease's bid that goes back into it.
    pub queue_book: Option<Pubkey>,
    pub payment_mint: Pubkey,
    /// A live token account of the client for the refund (see [`crate::token::is_account_of`]);
    /// `None` when it has none (it may have closed it): the refund is then owed by its stake
    /// account (`refunds_due`, see [`crate::ClaimRefunds`]).
    pub client_tokens: Option<Pubkey>,
    pub reclaim: bool,
    /// A reclaim by the client that takes the escrow back rather than failing over.
    pub refund: bool,
}

impl<'a> CloseLease<'a> {
    /// `end_lease` (or, with `reclaim`, `reclaim_escrow`) of lease `key` signed by `signer`,
    /// with the accounts its lease, machine and market name; the refund to `client_tokens`.
    pub fn of(
        signer: &'a (dyn Signer + Sync),
        (key, l): (Pubkey, &Lease),
        machine: &Machine,
        market: &Market,
        client_tokens: Option<Pubkey>,
        reclaim: bool,
    ) -> Self {
        let spot = l.kind == BidKind::Spot;
        CloseLease {
            signer,
            market: l.market,
            machine: l.machine,
            lease: key,
            bid: l.bid,
            client: l.client,
            agent: machine.agent,
            host: machine.owner,
            spot_book: spot.then_some(machine.spot_book),
            // A gang's last part may send the gang back to the queue, whoever settles it.
            queue_book: ((reclaim || l.parts > 1) && !spot).then_some(market.queue_book),
            payment_mint: market.payment_mint,
            client_tokens,
            reclaim,
            refund: false,
        }
    }
}

impl ClientInstruction for CloseLease<'_> {
    const NAME: &'static str = "end_lease";

    fn instruction(&self) -> Instruction {
        let accounts = gpu_market::accounts::CloseLease {
            signer: self.signer.pubkey(),
            market: self.market,
            machine: self.machine,
            lease: self.lease,
            bid: self.bid,
            client_stake: pda::stake(&self.market, &self.client).0,
            // Only a reclaim slashes, and never a client renting its own machine.
            host_stake: (self.reclaim && self.host != self.client)
                .then(|| pda::stake(&self.market, &self.host).0),
            spot_book: self.spot_book,
            queue_book: self.queue_book,
            client_tokens: self.client_tokens,
            client: self.client,
            agent: self.agent,
            payment_mint: self.payment_mint,
            payment_vault: pda::payment_vault(&self.market).0,
            token_program: spl_token_interface::ID,
        };
        if self.reclaim {
            ix(
                accounts,
                gpu_market::instruction::ReclaimEscrow {
                    refund: self.refund,
                },
            )
        } else {
            ix(accounts, gpu_market::instruction::EndLease {})
        }
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}

pub struct Slash<'a> {
    pub signer: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub machine: Pubkey,
    pub host: Pubkey,
}

impl ClientInstruction for Slash<'_> {
    const NAME: &'static str = "slash";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::Slash {
                signer: self.signer.pubkey(),
                market: self.market,
                machine: self.machine,
                host_stake: pda::stake(&self.market, &self.host).0,
            },
            gpu_market::instruction::Slash {},
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.signer]
    }
}

/// `extend_lease`: the lease's client buys `secs` more run time, paid from `client_tokens`.
pub struct ExtendLease<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub lease: Pubkey,
    pub machine: Pubkey,
    pub market: Pubkey,
    /// The market's queue book, which the program checks for bids that want the GPUs.
    pub queue_book: Pubkey,
    pub payment_mint: Pubkey,
    pub client_tokens: Pubkey,
    pub secs: u32,
}

impl<'a> ExtendLease<'a> {
    /// `extend_lease` of lease `key` by `secs`, with the accounts its lease and market name.
    pub fn of(
        client: &'a (dyn Signer + Sync),
        (key, l): (Pubkey, &Lease),
        market: &Market,
        client_tokens: Pubkey,
        secs: u32,
    ) -> Self {
        ExtendLease {
            client,
            lease: key,
            machine: l.machine,
            market: l.market,
            queue_book: market.queue_book,
            payment_mint: market.payment_mint,
            client_tokens,
            secs,
        }
    }
}

impl ClientInstruction for ExtendLease<'_> {
    const NAME: &'static str = "extend_lease";

    fn instruction(&self) -> Instruction {
        ix(
            gpu_market::accounts::ExtendLease {
                client: self.client.pubkey(),
                market: self.market,
                machine: self.machine,
                lease: self.lease,
                queue_book: self.queue_book,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::ExtendLease { secs: self.secs },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}
