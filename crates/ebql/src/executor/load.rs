//! Loading: the maps a compiled query declares, its programs through the
//! verifier ([`Loaded`]), then attached to their hooks ([`Probe`]).

use crate::error::{Error, Result};
use crate::window::monotonic_ns;
use ebql_compiler::codegen::{
    counters, ctl, BytesTail, MapKind, OutputLayout, MAP_OUT, MAP_PAIR, MAP_PAIR_LIVE,
};
use ebql_runtime::{
    AttachOptions, HookShare, Link, LoadTarget, Map, MapType, MmapArray, Program, RingBuffer,
    SharedHooks, StatsGuard,
};
use std::sync::atomic::Ordering;

/// The kernel objects of one query before it is attached. Field order is drop order.
pub(super) struct Loaded {
    pub(super) ringbuf: Option<RingBuffer>,
    pub(super) tap: Option<RingBuffer>,
    /// Every program with its tracepoint id; the last one writes the output.
    pub(super) progs: Vec<(Program, ebql_catalog::EventKind, ebql_catalog::Attach)>,
    pub(super) out: Map,
    tap_map: Option<Map>,
    /// The start map of a paired query.
    pub(super) pair_map: Option<Map>,
    /// With a task-storage start map: the per-CPU count of unmatched starts.
    pub(super) pair_live: Option<Map>,
    /// Further maps the plan declares (e.g. the all-zero value new groups start from).
    plan_maps: Vec<Map>,
    /// Index in `Compiled::maps` of `plan_maps[0]`: after the control and
    /// output maps, the tap or the pairing's start map, and the pairing's
    /// live-start counts, whichever the query has.
    first_plan_map: usize,
    /// Index in `plan_maps` of the stack-trace map, when the query reads a stack column.
    stack_map: Option<usize>,
    /// Index in `plan_maps` of the programs' own event counters (`counters`).
    counters: usize,
    pub(super) ctl: MmapArray,
    /// Every map's fd in `Compiled::maps` order: what the programs' map
    /// references are indexes into (a shared hook patches them in).
    fds: Vec<std::os::fd::RawFd>,
    _stats: Option<StatsGuard>,
}

/// Unmatched starts in task storage: the per-CPU counts summed (a start and
/// its end may run on different CPUs, so one CPU's count can be negative).
pub(super) fn starts_live(live: &Map) -> Result<u64> {
    let cpus = ebql_runtime::num_possible_cpus()?;
    let mut values = vec![0u8; 8 * cpus];
    if !live.lookup(&0u32.to_ne_bytes(), &mut values)? {
        return Ok(0);
    }
    let sum = values
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().expect("8 bytes")))
        .fold(0i64, i64::wrapping_add);
    u64::try_from(sum).map_err(|_| Error::Internal(format!("the per-CPU counts of unmatched starts sum to {sum}: more ends paired than starts stored")))
}

/// One program's event counters summed over the CPUs ([`counters`]).
#[derive(Default)]
pub(super) struct EventCounts {
    pub(super) seen: u64,
    pub(super) matched: u64,
    /// A pairing's end program only; 0 in the others.
    pub(super) ends_without_start: u64,
}

impl Loaded {
    /// Creates the maps `code` declares and loads the program (not attached);
    /// `attach_only`: programs that return at once instead (see [`super::ExecutorOptions::attach_only`]).
    pub(super) fn load(
        code: &ebql_compiler::Compiled,
        stats: Option<StatsGuard>,
        attach_only: bool,
    ) -> Result<Loaded> {
        let ctl = MmapArray::create("ebql_ctl", ctl::SIZE)?;
        // Generation 0 opened before any event (its cut stays 0); the others are not chosen yet.
        for gen in 1..4 {
            ctl.u64_at(ctl::cut_slot(gen))
                .store(ctl::NOT_CHOSEN, Ordering::SeqCst);
        }
        let create = |spec: &ebql_compiler::codegen::MapSpec| {
            let ty = match spec.kind {
                MapKind::PercpuHash => MapType::PercpuHash,
                MapKind::PercpuHashPrealloc => MapType::PercpuHashPrealloc,
                MapKind::MmapArray => MapType::MmapArray,
                MapKind::Array => MapType::Array,
                MapKind::RingBuf => MapType::RingBuf,
                MapKind::Hash => MapType::Hash,
                MapKind::SharedHash => MapType::HashNoPrealloc,
                MapKind::TaskStorage => MapType::TaskStorage,
                MapKind::PercpuArray => MapType::PercpuArray,
                MapKind::StackTrace => MapType::StackTrace,
            };
            Map::create(
                &spec.name,
                ty,
                spec.key_size,
                spec.value_size,
                spec.max_entries,
            )
        };
        let out = create(&code.maps[MAP_OUT])?;
        let tap_map = code
            .tap
            .as_ref()
            .and(code.maps.get(code.tap_map))
            .map(create)
            .transpose()?;
        let pair_map = code
            .maps
            .get(MAP_PAIR)
            .filter(|m| matches!(m.kind, MapKind::Hash | MapKind::TaskStorage))
            .map(create)
            .transpose()?;
        let task_storage = code
            .maps
            .get(MAP_PAIR)
            .is_some_and(|m| m.kind == MapKind::TaskStorage);
        let pair_live = code
            .maps
            .get(MAP_PAIR_LIVE)
            .filter(|_| task_storage)
            .map(create)
            .transpose()?;
        // In index order: a pairing's start map(s), then the tap.
        let mut fds = vec![ctl.map().fd(), out.fd()];
        fds.extend(pair_map.as_ref().map(Map::fd));
        fds.extend(pair_live.as_ref().map(Map::fd));
        fds.extend(tap_map.as_ref().map(Map::fd));
        let first_plan_map = fds.len();
        let plan_maps = code
            .maps
            .get(first_plan_map..)
            .unwrap_or_default()
            .iter()
            .map(create)
            .collect::<std::result::Result<Vec<Map>, _>>()?;
        fds.extend(plan_maps.iter().map(Map::fd));
        let mut progs = Vec::new();
        for spec in &code.programs {
            let target = LoadTarget {
                sleepable: spec.sleepable && !attach_only,
                ..LoadTarget::of(spec.event.kind, &spec.attach)
            };
            // A program taking a shared hook's cache runs alone behind a
            // wrapper: the verifier's instruction indexes start after it.
            let (insns, before) = if attach_only {
                (
                    ebql_compiler::codegen::return_at_once(spec.event.kind).bytes(),
                    0,
                )
            } else if spec.event_cache {
                SharedHooks::solo(&spec.program.bytes())
            } else {
                (spec.program.bytes(), 0)
            };
            let prog = Program::load(&spec.name, target, &insns, &fds).map_err(|e| match e {
                ebql_runtime::RuntimeError::Verifier(mut v) => {
                    v.origin =
                        v.pc.and_then(|pc| pc.checked_sub(before))
                            .and_then(|pc| spec.program.origin_of(pc))
                            .map(str::to_string);
                    Error::Verifier(v)
                }
                other => other.into(),
            })?;
            progs.push((prog, spec.event.kind, spec.attach.clone()));
        }
        let ringbuf = match &code.layout {
            OutputLayout::Stream {
                record_size,
                latest: None,
                ..
            } => Some(consumer(
                RingBuffer::new(&out, *record_size as usize)?,
                &code.layout,
            )),
            OutputLayout::Stream { .. } | OutputLayout::Groups { .. } => None,
        };
        let tap = match (&code.tap, &tap_map) {
            (Some(layout @ OutputLayout::Stream { record_size, .. }), Some(m)) => {
                Some(consumer(RingBuffer::new(m, *record_size as usize)?, layout))
            }
            _ => None,
        };
        let stack_map = code
            .maps
            .iter()
            .position(|m| m.kind == MapKind::StackTrace)
            .map(|i| i - first_plan_map);
        let counters = code
            .counters
            .checked_sub(first_plan_map)
            .ok_or_else(|| Error::Internal("the event counters map among the fixed maps".into()))?;
        Ok(Loaded {
            ringbuf,
            tap,
            progs,
            out,
            tap_map,
            pair_map,
            pair_live,
            plan_maps,
            first_plan_map,
            stack_map,
            counters,
            ctl,
            fds,
            _stats: stats,
        })
    }

    /// Program `index`'s own (seen, matched) counts, summed over CPUs.
    pub(super) fn event_counts(&self, index: usize) -> Result<EventCounts> {
        let cpus = ebql_runtime::num_possible_cpus()?;
        let stride = counters::SIZE as usize;
        let mut values = vec![0u8; stride * cpus];
        if !self.plan_maps[self.counters].lookup(&(index as u32).to_ne_bytes(), &mut values)? {
            return Err(Error::Internal(format!(
                "no event counters for program {index}"
            )));
        }
        let at = |v: &[u8], off: i16| {
            u64::from_ne_bytes(
                v[off as usize..off as usize + 8]
                    .try_into()
                    .expect("8 bytes"),
            )
        };
        Ok(values
            .chunks_exact(stride)
            .fold(EventCounts::default(), |sum, v| EventCounts {
                seen: sum.seen + at(v, counters::SEEN),
                matched: sum.matched + at(v, counters::MATCHED),
                ends_without_start: sum.ends_without_start + at(v, counters::ENDS_WITHOUT_START),
            }))
    }

    /// The stack-trace map, when the query reads a stack column.
    pub(super) fn stack_map(&self) -> Option<&Map> {
        self.stack_map.map(|i| &self.plan_maps[i])
    }

    /// The plan map at index `i` of `Compiled::maps` (the overflow hash,
    /// the COUNT(DISTINCT) set, …).
    pub(super) fn plan_map(&self, i: usize) -> &Map {
        &self.plan_maps[i - self.first_plan_map]
    }

    pub(super) fn map_count(&self) -> usize {
        2 + self.tap_map.is_some() as usize
            + self.pair_map.is_some() as usize
            + self.pair_live.is_some() as usize
            + self.plan_maps.len()
    }

    /// The program that writes the output.
    pub(super) fn main_prog(&self) -> &Program {
        &self.progs.last().expect("a loaded query has a program").0
    }
}

/// The kernel objects of one running query. Field order is drop order: the
/// links (detach) go first.
pub(super) struct Probe {
    pub(super) links: Vec<Link>,
    pub(super) k: Loaded,
    /// CLOCK_MONOTONIC ns just before the first link was attached: the
    /// start of the first time window (no event is timed before it).
    pub(super) attached_ns: u64,
    /// Per program (in `Compiled::programs` order): its shared hook's
    /// members and instructions when it joined one, `None` if alone.
    pub(super) shares: Vec<Option<HookShare>>,
}

impl Probe {
    /// Attaches `loaded`'s programs, `code.programs`' hooks: the end program
    /// first, so that every start stored from then on can be matched. With
    /// `shared`, a program that can share its hook joins it
    /// ([`SharedHooks::join`]); one whose combination the verifier refuses
    /// attaches alone, said on stderr.
    pub(super) fn attach(
        loaded: Loaded,
        code: &ebql_compiler::Compiled,
        shared: Option<&SharedHooks>,
    ) -> Result<Probe> {
        let attached_ns = monotonic_ns();
        let mut links = Vec::new();
        let mut shares = vec![None; code.programs.len()];
        for (i, ((prog, kind, at), spec)) in
            loaded.progs.iter().zip(&code.programs).enumerate().rev()
        {
            let target = LoadTarget {
                sleepable: spec.sleepable,
                ..LoadTarget::of(*kind, at)
            };
            let joined = match shared {
                Some(hooks) if SharedHooks::can_share(*kind, &target) => {
                    match hooks.join(
                        *kind,
                        at,
                        target,
                        &spec.program.bytes(),
                        &loaded.fds,
                        spec.pid,
                    ) {
                        Ok((link, share)) => {
                            shares[i] = Some(share);
                            Some(link)
                        }
                        Err(e)
                            if e.is_too_big()
                                || matches!(e, ebql_runtime::RuntimeError::Verifier(_)) =>
                        {
                            eprintln!(
                                "ebql: program {} attached alone: its shared hook cannot take it ({})",
                                spec.name,
                                e.to_string().lines().next().unwrap_or_default()
                            );
                            None
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => None,
            };
            let link = match joined {
                Some(l) => l,
                None => ebql_runtime::attach(prog, *kind, at, &AttachOptions { pid: spec.pid })?,
            };
            links.push(link);
        }
        Ok(Probe {
            links,
            k: loaded,
            attached_ns,
            shares,
        })
    }
}

/// `rb` copying only the bytes a record of `layout` holds, when its
/// records end in a `bytes()` value ([`BytesTail`]).
fn consumer(rb: RingBuffer, layout: &OutputLayout) -> RingBuffer {
    match BytesTail::of(layout) {
        Some(tail) => rb.with_used_len(Box::new(move |rec| tail.used_len(rec))),
        None => rb,
    }
}
