//! `gpu-market host register|update|pause|resume|retire|close|claim|slash|list|show`.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use gpu_market::pda;
use gpu_market::state::{
    GpuSpec, Machine, MachineFault, MachineNetwork, MachineStatus, MachineTerms, Market,
    StakeAccount, BOOK_EMPTY_SPACE, MAX_CACHED_IMAGES, REGION_LEN,
};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::gpus::{format_uuid, GpuClassRef, GpusFile};
use gpu_market_sdk::{
    init_spot_book, open_book_instructions, ClaimPay, ClientInstruction, CloseMachine,
    RegisterMachine, SetCachedImages, SetMachineStatus, Slash, UpdateMachine,
};
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::classes;
use crate::config::{Config, Group, Signing};
use crate::output::{print_list, print_record, text, Fields};
use crate::parse;

#[derive(Subcommand)]
pub enum HostCommand {
    /// Registers a machine in a market (the keypair is its owner) and opens its spot book.
    /// The owner needs the market's minimum host stake.
    Register {
        #[arg(long)]
        market: Pubkey,
        /// Distinguishes several machines of one owner.
        #[arg(long, default_value_t = 0)]
        id: u64,
        #[command(flatten)]
        terms: TermArgs,
    },
    /// Changes a machine's declared terms; terms not given stay as they are.
    Update {
        machine: Pubkey,
        #[command(flatten)]
        terms: TermArgs,
    },
    /// Stops offering a machine (running leases go on).
    Pause { machine: Pubkey },
    /// Offers a paused machine again.
    Resume { machine: Pubkey },
    /// Retires a machine for good.
    Retire { machine: Pubkey },
    /// Closes a retired machine with no lease left, with its empty spot book, and gives their
    /// rent back (its pay not claimed yet is claimed in the same transaction).
    Close { machine: Pubkey },
    /// Pays a machine's owner what its leases' proofs accrued (its agent claims every
    /// `claim_interval_secs`). Anyone may send it: the pay only goes to the owner.
    Claim {
        machine: Pubkey,
        /// The owner's payment-token account to pay [default: its largest].
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Slashes a machine's host on the evidence its own proofs left (intervals they skipped,
    /// power-limit violations): anyone may, once there is enough; the slashed stake goes to the
    /// stake treasury.
    Slash { machine: Pubkey },
    /// Lists a market's machines.
    List {
        #[arg(long)]
        market: Pubkey,
        /// Only this owner's machines.
        #[arg(long)]
        owner: Option<Pubkey>,
    },
    /// Shows one machine with its GPUs.
    Show { machine: Pubkey },
}

#[derive(Args)]
pub struct TermArgs {
    /// The machine's GPUs: a TOML or JSON file with a `gpu` list (required to register).
    #[arg(long, value_name = "FILE")]
    gpus: Option<PathBuf>,
    /// The agent's hot key, which signs heartbeats and usage proofs [register default: the
    /// keypair].
    #[arg(long)]
    agent: Option<Pubkey>,
    /// Free-form region label, at most 16 bytes.
    #[arg(long)]
    region: Option<String>,
    /// The host's floor per GPU-hour, in payment token units [register default: 0].
    #[arg(long)]
    price_floor: Option<String>,
    /// Electricity cost per kWh, in payment token units (spot bids rank by profit after it)
    /// [register default: 0].
    #[arg(long)]
    electricity_cost: Option<String>,
    /// sha256 digest of an image the machine has cached (repeatable; replaces the list).
    #[arg(long = "cached-image", value_name = "DIGEST")]
    cached_images: Vec<String>,
    /// Where clients reach the machine: a DNS name or IP address for published ports and the
    /// agent's API (at most 64 bytes) [register default: none, nothing published].
    #[arg(long)]
    public_host: Option<String>,
    /// The port of the agent's API (its `[api] listen`) [register default: 7450 with a public
    /// host, else none].
    #[arg(long)]
    api_port: Option<u16>,
    /// The most container ports one lease may publish [register default: 0].
    #[arg(long)]
    ports_per_lease: Option<u8>,
    /// The most GiB of scratch volume (a tmpfs at /workspace, kept after the lease for its
    /// client to fetch) one lease may ask [register default: 0].
    #[arg(long)]
    scratch_gib: Option<u16>,
    /// CPU cores the machine gives its leases in all, e.g. 48 (each lease holds what its bid
    /// asks with `--cpus`) [register default: none, only bids that reserve no CPU fit].
    #[arg(long, value_name = "CORES", value_parser = parse::cpu_milli)]
    cpus: Option<u32>,
    /// Memory the machine gives its leases in all, e.g. 256GiB [register default: none, only
    /// bids that reserve no memory fit].
    #[arg(long, value_name = "SIZE", value_parser = parse::memory_mib)]
    memory: Option<u32>,
    /// Where leases may connect to: `none`, `open` (any public address) or a comma-separated
    /// allow-list of IPv4 networks (`203.0.113.0/24,198.51.100.7`) [register default: none].
    /// The host itself, cloud metadata and other leases are never reachable.
    #[arg(long, value_name = "POLICY")]
    egress: Option<String>,
}

/// The TLS port of the agent's API unless the host names another.
pub const DEFAULT_API_PORT: u16 = 7450;

/// Reads a GPUs file (`.json` as JSON, anything else as TOML), each GPU's class by number or by
/// the name market `m` gives it, and checks each GPU's ranges.
fn read_gpus(path: &Path, m: &Market) -> Result<Vec<GpuSpec>> {
    let body = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the GPUs file {}", path.display()))?;
    let file: GpusFile = if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&body).map_err(|e| anyhow!("{}", e))
    } else {
        toml::from_str(&body).map_err(|e| anyhow!("{}", e.message()))
    }
    .with_context(|| format!("the GPUs file {} is not valid", path.display()))?;
    if file.gpu.is_empty() {
        bail!("the GPUs file {} lists no GPU", path.display());
    }
    file.gpu
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let class = match &g.class {
                GpuClassRef::Number(n) => classes::parse(m, &n.to_string()),
                GpuClassRef::Name(name) => classes::parse(m, name),
            }
            .with_context(|| format!("GPU {i} in {}", path.display()))?;
            let spec = g.spec(class).ok_or_else(|| {
                anyhow!(
                    "GPU {i} in {}: bad GPU UUID {:?}: expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx",
                    path.display(),
                    g.uuid
                )
            })?;
            spec.limits().validate().map_err(|e| {
                anyhow!(
                    "GPU {i} in {}: {e} (or its power range starts at 0 W)",
                    path.display()
                )
            })?;
            Ok(spec)
        })
        .collect()
}

impl TermArgs {
    /// `base` with every term given here replaced (GPU classes named as market `m` names them,
    /// amounts in decimals of its payment token, `payment_decimals`).
    fn apply(
        &self,
        mut terms: MachineTerms,
        m: &Market,
        payment_decimals: u8,
    ) -> Result<MachineTerms> {
        if let Some(path) = &self.gpus {
            terms.gpus = read_gpus(path, m)?;
        }
        if let Some(agent) = self.agent {
            terms.agent = agent;
        }
        if let Some(region) = &self.region {
            terms.region = parse::padded::<REGION_LEN>(region, "region")?;
        }
        if let Some(p) = &self.price_floor {
            terms.price_floor_per_gpu_hour = parse::amount(p, payment_decimals, "price floor")?;
        }
        if let Some(c) = &self.electricity_cost {
            terms.electricity_cost_per_kwh =
                parse::amount(c, payment_decimals, "electricity cost")?;
        }
        let net = &mut terms.network;
        if let Some(host) = &self.public_host {
            net.host = host.clone();
            if self.api_port.is_none() && net.api_port == 0 {
                net.api_port = DEFAULT_API_PORT;
            }
        }
        if let Some(port) = self.api_port {
            net.api_port = port;
        }
        if let Some(n) = self.ports_per_lease {
            net.ports_per_lease = n;
        }
        if let Some(gib) = self.scratch_gib {
            net.scratch_gib = gib;
        }
        if let Some(milli) = self.cpus {
            terms.cpu_milli = milli;
        }
        if let Some(mib) = self.memory {
            terms.memory_mib = mib;
        }
        if let Some(policy) = &self.egress {
            (net.egress, net.allow) = parse::egress(policy)?;
        }
        Ok(terms)
    }

    /// The cached images the flags declare, if they name any.
    fn cached_images(&self) -> Result<Option<Vec<[u8; 32]>>> {
        if self.cached_images.is_empty() {
            return Ok(None);
        }
        let images: Vec<[u8; 32]> = self
            .cached_images
            .iter()
            .map(|d| parse::digest(d))
            .collect::<Result<_>>()?;
        if images.len() > MAX_CACHED_IMAGES {
            bail!(
                "a machine declares at most {MAX_CACHED_IMAGES} cached images, not {}",
                images.len()
            );
        }
        Ok(Some(images))
    }
}

pub fn run(config: &Config, command: HostCommand) -> Result<()> {
    match command {
        HostCommand::Register { market, id, terms } => {
            let owner = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if terms.gpus.is_none() {
                bail!("give the machine's GPUs with --gpus FILE");
            }
            let d = config.mint_decimals(&m.stake_mint)?;
            let stake: StakeAccount = config
                .fetch(&pda::stake(&market, &owner.pubkey()).0, "stake")
                .map_err(|_| {
                    anyhow!(
                        "{} has no stake in market {market}: hosts deposit at least {} with `gpu-market stake deposit` first",
                        owner.pubkey(),
                        gpu_market_core::amount::format(m.params.min_host_stake, d)
                    )
                })?;
            let needed = stake.bonded.saturating_add(m.params.min_host_stake);
            if stake.amount < needed {
                bail!(
                    "the stake of {} is {}, below the {} its machines need: {} bonded by its {} machines and the market's minimum of {} for this one",
                    owner.pubkey(),
                    gpu_market_core::amount::format(stake.amount, d),
                    gpu_market_core::amount::format(needed, d),
                    gpu_market_core::amount::format(stake.bonded, d),
                    stake.machines,
                    gpu_market_core::amount::format(m.params.min_host_stake, d),
                );
            }
            let base = MachineTerms {
                agent: owner.pubkey(),
                region: [0; REGION_LEN],
                gpus: Vec::new(),
                price_floor_per_gpu_hour: 0,
                electricity_cost_per_kwh: 0,
                network: MachineNetwork::default(),
                cpu_milli: 0,
                memory_mib: 0,
            };
            let images = terms.cached_images()?;
            let terms = terms.apply(base, &m, config.mint_decimals(&m.payment_mint)?)?;
            let register = RegisterMachine {
                owner: owner.key(),
                market,
                id,
                terms,
            };
            let machine = register.machine();
            let book = Keypair::new();
            let mut groups = vec![Group {
                instructions: vec![register.instruction()],
                signers: vec![],
            }];
            groups.extend(images.map(|images| cached_images_group(owner.key(), machine, images)));
            groups.push(spot_book_group(config, owner.key(), machine, &book)?);
            // One transaction where the machine's terms, its images and its spot book fit a
            // packet together; a machine of 16 GPUs with every network term takes more.
            let signatures = config.send_groups(&owner, &groups).map_err(|e| {
                let registered = config
                    .fetch_if_any::<Machine>(&machine, "machine")
                    .is_ok_and(|m| m.is_some());
                if registered {
                    anyhow!("{e}: machine {machine} is registered; `gpu-market host update {machine}` opens its spot book and declares its images")
                } else {
                    e
                }
            })?;
            show(config, &machine, signatures.last().cloned())
        }
        HostCommand::Update { machine, terms } => {
            let owner = config.signer()?;
            let mach = owned_machine(config, &machine, &owner.pubkey())?;
            let m: Market = config.fetch(&mach.market, "market")?;
            let images = terms.cached_images()?;
            let new = terms.apply(mach.terms(), &m, config.mint_decimals(&m.payment_mint)?)?;
            let mut groups = Vec::new();
            if new != mach.terms() {
                groups.push(update_group(config, owner.key(), (machine, &mach), new)?);
            }
            let declared = &mach.cached_images[..mach.cached_image_count as usize];
            if let Some(images) = images.filter(|images| images.as_slice() != declared) {
                groups.push(cached_images_group(owner.key(), machine, images));
            }
            // A registration whose spot book did not land is finished here.
            let book = Keypair::new();
            if mach.spot_book == Pubkey::default() && mach.status != MachineStatus::Retired {
                groups.push(spot_book_group(config, owner.key(), machine, &book)?);
            }
            if groups.is_empty() {
                bail!("nothing to change: give at least one term to update");
            }
            let signatures = config.send_groups(&owner, &groups)?;
            show(config, &machine, signatures.last().cloned())
        }
        HostCommand::Pause { machine } => set_status(config, machine, MachineStatus::Paused),
        HostCommand::Resume { machine } => set_status(config, machine, MachineStatus::Active),
        HostCommand::Retire { machine } => set_status(config, machine, MachineStatus::Retired),
        HostCommand::Close { machine } => {
            let owner = config.signer()?;
            let mach = owned_machine(config, &machine, &owner.pubkey())?;
            if mach.status != MachineStatus::Retired {
                bail!(
                    "machine {machine} is {}: retire it with `gpu-market host retire {machine}` first",
                    status_name(mach.status)
                );
            }
            if mach.leases > 0 {
                bail!(
                    "machine {machine} still has {} leases: they must end first",
                    mach.leases
                );
            }
            let spot_book = (mach.spot_book != Pubkey::default()).then_some(mach.spot_book);
            if let Some(book) = spot_book {
                let waiting =
                    read_book(&config.account_data(&book, "book")?).map_or(0, |b| b.entries.len());
                if waiting > 0 {
                    bail!(
                        "the spot book of machine {machine} still holds {waiting} bids: their clients cancel them, or anyone prunes them after their latest starts"
                    );
                }
            }
            let close = CloseMachine {
                owner: owner.key(),
                market: mach.market,
                machine,
                spot_book,
            };
            // The program closes no machine with pay unclaimed: claimed first, in the same
            // transaction, and said.
            let claim = if mach.unclaimed_pay + mach.unclaimed_fee > 0 {
                let m: Market = config.fetch(&mach.market, "market")?;
                let ix = claim_pay(config, (machine, &mach), m.payment_mint, None)?;
                let paid =
                    parse::tokens(mach.unclaimed_pay, config.mint_decimals(&m.payment_mint)?);
                Some((ix, paid))
            } else {
                None
            };
            let mut ixs: Vec<&dyn crate::config::Sendable> = Vec::new();
            ixs.extend(
                claim
                    .as_ref()
                    .map(|(c, _)| c as &dyn crate::config::Sendable),
            );
            ixs.push(&close);
            let signature = config.send_all(&owner, &ixs)?;
            let mut fields: Fields = vec![("machine", text(machine))];
            fields.extend(spot_book.map(|b| ("spot_book", text(b))));
            fields.extend(claim.map(|(_, paid)| ("paid", paid)));
            fields.extend([("closed", true.into()), ("signature", text(signature))]);
            print_record(config.output, &fields);
            Ok(())
        }
        HostCommand::List { market, owner } => {
            print_list(
                config.output,
                LIST_COLUMNS,
                &machine_rows(config, &market, owner)?,
            );
            Ok(())
        }
        HostCommand::Show { machine } => show(config, &machine, None),
        HostCommand::Slash { machine } => slash(config, machine),
        HostCommand::Claim { machine, tokens } => claim(config, machine, tokens),
    }
}

/// The `claim_pay` of `machine`'s accrued pay, in a market paying in `payment_mint`, into
/// `tokens` (or the owner's largest account of that mint).
fn claim_pay(
    config: &Config,
    (machine, mach): (Pubkey, &Machine),
    payment_mint: Pubkey,
    tokens: Option<Pubkey>,
) -> Result<ClaimPay> {
    let (host_tokens, _) = config.token_account(&mach.owner, &payment_mint, tokens)?;
    Ok(ClaimPay {
        market: mach.market,
        machine,
        payment_mint,
        host_tokens,
    })
}

fn claim(config: &Config, machine: Pubkey, tokens: Option<Pubkey>) -> Result<()> {
    let signer = config.signer()?;
    let mach: Machine = config.fetch(&machine, "machine")?;
    if mach.unclaimed_pay + mach.unclaimed_fee == 0 {
        // Nothing accrued since the last claim: no transaction, no fee.
        print_record(
            config.output,
            &[
                ("machine", text(machine)),
                ("owner", text(mach.owner)),
                ("paid", text("0")),
                (
                    "note",
                    text("nothing to claim: no proof accrued pay since the last claim"),
                ),
            ],
        );
        return Ok(());
    }
    let m: Market = config.fetch(&mach.market, "market")?;
    let ix = claim_pay(config, (machine, &mach), m.payment_mint, tokens)?;
    let signature = config.send_all(&signer, &[&ix])?;
    let d = config.mint_decimals(&m.payment_mint)?;
    print_record(
        config.output,
        &[
            ("machine", text(machine)),
            ("owner", text(mach.owner)),
            ("paid", parse::tokens(mach.unclaimed_pay, d)),
            ("fee", parse::tokens(mach.unclaimed_fee, d)),
            ("to", text(ix.host_tokens)),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}

/// `update_machine` to `terms`, refused while spot bids wait on a change of the electricity
/// cost (they are ranked by the host's profit at the cost they saw).
fn update_group<'a>(
    config: &Config,
    owner: Signing<'a>,
    (machine, mach): (Pubkey, &Machine),
    terms: MachineTerms,
) -> Result<Group<'a>> {
    let spot_book = (terms.electricity_cost_per_kwh != mach.electricity_cost_per_kwh
        && mach.spot_book != Pubkey::default())
    .then_some(mach.spot_book);
    if let Some(book) = spot_book {
        let waiting =
            read_book(&config.account_data(&book, "spot book")?).map_or(0, |b| b.entries.len());
        if waiting > 0 {
            bail!(
                "{waiting} spot bids wait on machine {machine}, ranked by your profit at the current electricity cost: \
                 pause it (`gpu-market host pause {machine}`) and change the cost once they have run or expired"
            );
        }
    }
    let update = UpdateMachine {
        owner,
        market: mach.market,
        machine,
        spot_book,
        terms,
    };
    Ok(Group {
        instructions: vec![update.instruction()],
        signers: vec![],
    })
}

/// `set_cached_images` for `machine`.
fn cached_images_group<'a>(owner: Signing, machine: Pubkey, images: Vec<[u8; 32]>) -> Group<'a> {
    let set = SetCachedImages {
        owner,
        machine,
        images,
    };
    Group {
        instructions: vec![set.instruction()],
        signers: vec![],
    }
}

/// The empty spot book of `machine` in the new account `book`, created and opened together.
fn spot_book_group<'a>(
    config: &Config,
    owner: Signing,
    machine: Pubkey,
    book: &'a Keypair,
) -> Result<Group<'a>> {
    let rent = config.rent_exempt_minimum(BOOK_EMPTY_SPACE)?;
    Ok(Group {
        instructions: open_book_instructions(
            &owner.pubkey(),
            &book.pubkey(),
            rent,
            init_spot_book(&owner.pubkey(), &machine, &book.pubkey()),
        )
        .to_vec(),
        signers: vec![book],
    })
}

/// The columns `host list` prints of [`machine_rows`].
pub(crate) const LIST_COLUMNS: &[&str] = &[
    "machine",
    "owner",
    "id",
    "status",
    "gpu_count",
    "price_floor_per_gpu_hour",
    "leases",
    "last_heartbeat",
];

/// A market's machines (only `owner`'s, given one) with their GPUs, as `host list` shows them
/// (and `gpu-market serve`'s market page).
pub(crate) fn machine_rows(
    config: &Config,
    market: &Pubkey,
    owner: Option<Pubkey>,
) -> Result<Vec<Fields>> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let mut filter = vec![(0, *market)];
    filter.extend(owner.map(|o| (32, o)));
    Ok(config
        .program_accounts_of::<Machine>(&filter)?
        .iter()
        .map(|(key, mach)| machine_fields(key, mach, decimals))
        .collect())
}

fn owned_machine(config: &Config, machine: &Pubkey, owner: &Pubkey) -> Result<Machine> {
    let m: Machine = config.fetch(machine, "machine")?;
    if m.owner != *owner {
        bail!(
            "machine {machine} belongs to {}, not to the keypair {owner}",
            m.owner
        );
    }
    Ok(m)
}

fn set_status(config: &Config, machine: Pubkey, status: MachineStatus) -> Result<()> {
    let owner = config.signer()?;
    let ixs = plan_set_status(config, owner.key(), &machine, status)?;
    let signature = config.send(&owner, &ixs, &[])?;
    show(config, &machine, Some(signature))
}

/// `host pause|resume|retire`'s instruction: `owner` sets `machine`'s status (refused for a
/// machine not theirs or already in that status). What `gpu-market serve`'s host actions build
/// for a wallet.
pub(crate) fn plan_set_status(
    config: &Config,
    owner: Signing,
    machine: &Pubkey,
    status: MachineStatus,
) -> Result<Vec<Instruction>> {
    let mach = owned_machine(config, machine, &owner.pubkey())?;
    if mach.status == status {
        bail!("machine {machine} is already {}", status_name(status));
    }
    Ok(vec![SetMachineStatus {
        owner,
        market: mach.market,
        machine: *machine,
        status,
    }
    .instruction()])
}

pub fn status_name(s: MachineStatus) -> &'static str {
    match s {
        MachineStatus::Active => "active",
        MachineStatus::Paused => "paused",
        MachineStatus::Retired => "retired",
    }
}

/// A machine's status as `host list` and `host show` print it: a machine its agent paused for a
/// GPU fault says so.
fn status_text(status: MachineStatus, fault: Option<&MachineFault>) -> &'static str {
    match (status, fault) {
        (MachineStatus::Paused, Some(_)) => "paused (GPU fault)",
        (s, _) => status_name(s),
    }
}

/// The fault its agent reported (null when none).
fn fault_json(fault: Option<&MachineFault>) -> Value {
    fault.map_or(
        Value::Null,
        |f| json!({"gpu": f.gpu, "xid": f.xid, "at": f.at}),
    )
}

/// Why machine `key` is paused after the GPU fault `f`, at cluster time `now`, and what its
/// owner does about it.
fn fault_sentence(key: &Pubkey, f: &MachineFault, now: i64) -> String {
    let xid = match f.xid {
        0 => String::new(),
        xid => format!(" (Xid {xid})"),
    };
    format!(
        "paused: GPU {} reported a fatal fault{xid} at unix time {} ({} s ago); resume it with \
         `gpu-market host resume {key}` once the GPU is serviced",
        f.gpu,
        f.at,
        now.saturating_sub(f.at).max(0)
    )
}

fn gpu_json(g: &GpuSpec, used_gib: u16) -> Value {
    json!({
        "uuid": format_uuid(&g.uuid),
        "class": g.class,
        "topology_group": g.topology_group,
        "memory_gib": g.memory_gib,
        "used_gib": used_gib,
        "power_w": g.power_w,
        "core_lock_mhz": g.core_lock_mhz,
        "mem_lock_mhz": g.mem_lock_mhz,
        "core_offset_mhz": g.core_offset_mhz,
        "mem_offset_mhz": g.mem_offset_mhz,
    })
}

fn machine_fields(key: &Pubkey, m: &Machine, payment_decimals: u8) -> Fields {
    let gpus: Vec<Value> = m
        .gpus()
        .iter()
        .zip(m.used_gib)
        .map(|(g, used)| gpu_json(g, used))
        .collect();
    let images: Vec<Value> = m.cached_images[..m.cached_image_count as usize]
        .iter()
        .map(|d| text(hex::encode(d)))
        .collect();
    vec![
        ("machine", text(key)),
        ("market", text(m.market)),
        ("owner", text(m.owner)),
        ("agent", text(m.agent)),
        ("id", m.id.into()),
        ("status", text(status_text(m.status, m.fault.as_ref()))),
        ("fault", fault_json(m.fault.as_ref())),
        ("region", text(parse::unpadded(&m.region))),
        ("gpu_count", m.gpu_count.into()),
        ("gpu_sharing", text(gpu_sharing(m))),
        (
            "price_floor_per_gpu_hour",
            parse::tokens(m.price_floor_per_gpu_hour, payment_decimals),
        ),
        (
            "electricity_cost_per_kwh",
            parse::tokens(m.electricity_cost_per_kwh, payment_decimals),
        ),
        ("spot_book", text(m.spot_book)),
        ("reservation", reservation_json(m)),
        ("leases", m.leases.into()),
        (
            "unclaimed_pay",
            parse::tokens(m.unclaimed_pay, payment_decimals),
        ),
        ("registered_at", m.registered_at.into()),
        ("last_heartbeat", m.last_heartbeat.into()),
        ("missed_intervals", m.missed_intervals.into()),
        ("violations", m.violations.into()),
        ("cached_images", Value::Array(images)),
        ("network", network_json(&m.network)),
        ("cpus", parse::cores(m.cpu_milli)),
        ("cpus_held", parse::cores(m.used_cpu_milli)),
        ("memory_mib", m.memory_mib.into()),
        ("memory_mib_held", m.used_memory_mib.into()),
        ("gpus", Value::Array(gpus)),
    ]
}

/// Whether the machine's GPUs are shared between leases in GiB slices, as its agent said.
fn gpu_sharing(m: &Machine) -> &'static str {
    match m.whole_gpus != 0 {
        true => "whole GPUs only: its agent cannot confine a lease to a GiB slice (no NVIDIA MPS), so each GPU takes one lease",
        false => "GiB slices: leases may share a GPU, each confined to its slice (NVIDIA MPS)",
    }
}

/// The queue bid the machine holds GPUs for, from when, which GPUs and how much CPU and memory
/// (`null`: none). It lapses a silence window after its start.
fn reservation_json(m: &Machine) -> Value {
    let r = &m.reservation;
    if !r.is_set() {
        return Value::Null;
    }
    json!({
        "bid": r.bid.to_string(),
        "start": r.start,
        "gpus": (0..16u8).filter(|g| r.gpus & (1 << g) != 0).collect::<Vec<_>>(),
        "cpus": parse::cores(r.cpu_milli),
        "memory_mib": r.memory_mib,
    })
}

/// What a client sees of a machine's network before bidding.
fn network_json(n: &MachineNetwork) -> Value {
    json!({
        "public_host": n.host,
        "api_port": n.api_port,
        "ports_per_lease": n.ports_per_lease,
        "scratch_gib": n.scratch_gib,
        "egress": parse::format_egress(n.egress, &n.allow),
    })
}

/// `host slash`: refused before anything is sent when the machine's current evidence is short.
fn slash(config: &Config, machine: Pubkey) -> Result<()> {
    let signer = config.signer()?;
    let mut mach: Machine = config.fetch(&machine, "machine")?;
    let m: Market = config.fetch(&mach.market, "market")?;
    mach.expire_evidence(config.cluster_time()?, &m);
    let evidence = mach.unslashed_missed + mach.unslashed_violations;
    let needed = m.params.slash_evidence as u32;
    if evidence < needed.max(1) {
        bail!(
            "no slashing evidence against machine {machine}: {} skipped intervals and {} power-limit violations are current, the market slashes from {needed}",
            mach.unslashed_missed,
            mach.unslashed_violations
        );
    }
    let stake = pda::stake(&mach.market, &mach.owner).0;
    let before: StakeAccount = config.fetch(&stake, "stake")?;
    let signature = config.send_all(
        &signer,
        &[&Slash {
            signer: signer.key(),
            market: mach.market,
            machine,
            host: mach.owner,
        }],
    )?;
    let after: StakeAccount = config.fetch(&stake, "stake")?;
    let d = config.mint_decimals(&m.stake_mint)?;
    let taken = (before.amount + before.pending_unstake) - (after.amount + after.pending_unstake);
    print_record(
        config.output,
        &[
            ("machine", text(machine)),
            ("host", text(mach.owner)),
            ("skipped_intervals", mach.unslashed_missed.into()),
            ("power_violations", mach.unslashed_violations.into()),
            ("slashed", parse::tokens(taken, d)),
            (
                "host_stake_left",
                parse::tokens(after.amount + after.pending_unstake, d),
            ),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}

fn show(config: &Config, machine: &Pubkey, signature: Option<String>) -> Result<()> {
    let mach: Machine = config.fetch(machine, "machine")?;
    let m: Market = config.fetch(&mach.market, "market")?;
    let mut fields = machine_fields(machine, &mach, config.mint_decimals(&m.payment_mint)?);
    if let (MachineStatus::Paused, Some(f)) = (mach.status, &mach.fault) {
        // Beside the status and the fault, where its owner looks first.
        let at = fields
            .iter()
            .position(|(k, _)| *k == "fault")
            .map_or(0, |i| i + 1);
        let said = fault_sentence(machine, f, config.cluster_time()?);
        fields.insert(at, ("paused_because", text(said)));
    }
    if let Some(sig) = signature {
        fields.push(("signature", text(sig)));
    }
    print_record(config.output, &fields);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_paused_for_a_gpu_fault_says_why_and_how_to_resume() {
        let f = MachineFault {
            gpu: 1,
            xid: 79,
            at: 1_000,
        };
        assert_eq!(
            status_text(MachineStatus::Paused, Some(&f)),
            "paused (GPU fault)"
        );
        assert_eq!(status_text(MachineStatus::Paused, None), "paused");
        assert_eq!(status_text(MachineStatus::Retired, Some(&f)), "retired");
        assert_eq!(
            fault_json(Some(&f)),
            json!({"gpu": 1, "xid": 79, "at": 1_000})
        );
        assert_eq!(fault_json(None), Value::Null);
        let key = Pubkey::new_unique();
        assert_eq!(
            fault_sentence(&key, &f, 1_060),
            format!(
                "paused: GPU 1 reported a fatal fault (Xid 79) at unix time 1000 (60 s ago); \
                 resume it with `gpu-market host resume {key}` once the GPU is serviced"
            )
        );
        let no_xid = MachineFault { xid: 0, ..f };
        assert!(fault_sentence(&key, &no_xid, 1_000)
            .starts_with("paused: GPU 1 reported a fatal fault at unix time 1000 (0 s ago);"));
    }
}
