//! `ebql.query()`'s keywords: the options of `ebql query`
//! (crates/ebql/src/cli/args.rs and cli/query.rs), with the same names
//! (`-` as `_`), defaults and meaning, checked here so that a wrong one is
//! a `TypeError` or `ValueError` naming it.

use std::time::Duration;

use ebql::command::GatedCommand;
use ebql::ExecutorOptions;
use ebql_compiler::choose::{AggregateChoice, GroupMapChoice, HookChoice, HookCosts, Optimize};
use ebql_compiler::scope::ProcessScope;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// Every keyword of `query()` after `sql`, in order (for messages).
pub(crate) const KEYWORDS: [&str; 20] = [
    "duration",
    "pid",
    "command",
    "follow",
    "cgroup",
    "max_groups",
    "max_distinct",
    "hook",
    "optimize",
    "group_map",
    "aggregate",
    "sample_ms",
    "sample_first",
    "no_faulting_reads",
    "bpf_stats",
    "attach_only",
    "align_windows",
    "partial",
    "host_id",
    "query_id",
];

/// `query()`'s keywords as Python gave them: `None` for one not given
/// (its default then). Checked here rather than by pyo3, whose type errors
/// do not name the keyword.
pub(crate) struct Keywords<'py> {
    pub duration: Option<Bound<'py, PyAny>>,
    pub pid: Option<Bound<'py, PyAny>>,
    pub command: Option<Bound<'py, PyAny>>,
    pub follow: Option<Bound<'py, PyAny>>,
    pub cgroup: Option<Bound<'py, PyAny>>,
    pub max_groups: Option<Bound<'py, PyAny>>,
    pub max_distinct: Option<Bound<'py, PyAny>>,
    pub hook: Option<Bound<'py, PyAny>>,
    pub optimize: Option<Bound<'py, PyAny>>,
    pub group_map: Option<Bound<'py, PyAny>>,
    pub aggregate: Option<Bound<'py, PyAny>>,
    pub sample_ms: Option<Bound<'py, PyAny>>,
    pub sample_first: Option<Bound<'py, PyAny>>,
    pub no_faulting_reads: Option<Bound<'py, PyAny>>,
    pub bpf_stats: Option<Bound<'py, PyAny>>,
    pub attach_only: Option<Bound<'py, PyAny>>,
    pub align_windows: Option<Bound<'py, PyAny>>,
    pub partial: Option<Bound<'py, PyAny>>,
    pub host_id: Option<Bound<'py, PyAny>>,
    pub query_id: Option<Bound<'py, PyAny>>,
    /// Keywords `query()` does not take.
    pub unknown: Option<Bound<'py, PyDict>>,
}

/// What the keywords ask for, checked; nothing started yet.
pub(crate) struct Checked {
    pub options: ExecutorOptions,
    pub duration: Option<Duration>,
    /// The command line of `command=`, to start stopped before its exec.
    pub command: Option<Vec<String>>,
    pub follow: bool,
    pub pid: Option<u32>,
    /// The cgroup v2 directory of `cgroup=`.
    pub cgroup: Option<String>,
}

impl Checked {
    /// Starts the command (stopped before its exec) if there is one, and
    /// sets the query's scope, as the CLI's `TargetArgs::apply`.
    pub(crate) fn start_target(&mut self) -> Result<Option<GatedCommand>, ebql::Error> {
        let command = match &self.command {
            Some(argv) => Some(GatedCommand::spawn(argv, self.follow)?),
            None => None,
        };
        self.options.codegen.scope = match (&command, self.pid, &self.cgroup) {
            (Some(c), ..) => Some(c.scope()),
            (None, Some(pid), _) => Some(ProcessScope::Pid(pid)),
            (None, None, Some(path)) => Some(ProcessScope::Cgroup(ebql::command::cgroup_id(path)?)),
            (None, None, None) => None,
        };
        Ok(command)
    }
}

fn value_error(text: String) -> PyErr {
    PyValueError::new_err(text)
}

fn type_error(text: String) -> PyErr {
    PyTypeError::new_err(text)
}

/// A bool keyword (`True`/`False`; `None`: False).
fn flag(keyword: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    match v {
        None => Ok(false),
        Some(v) if v.is_instance_of::<PyBool>() => v.extract(),
        Some(v) => Err(type_error(format!(
            "{keyword} must be True or False, got {}",
            type_name(v)
        ))),
    }
}

/// An int keyword (`None`: `default`).
fn integer(keyword: &str, v: Option<&Bound<'_, PyAny>>, default: i64) -> PyResult<i64> {
    match v {
        None => Ok(default),
        Some(v) if v.is_instance_of::<PyInt>() && !v.is_instance_of::<PyBool>() => v
            .extract()
            .map_err(|_| value_error(format!("{keyword} is out of range: {v}"))),
        Some(v) => Err(type_error(format!(
            "{keyword} must be an int, got {}",
            type_name(v)
        ))),
    }
}

/// A str keyword (`None`: `default`).
fn text(keyword: &str, v: Option<&Bound<'_, PyAny>>, default: &str) -> PyResult<String> {
    match v {
        None => Ok(default.to_string()),
        Some(v) if v.is_instance_of::<PyString>() => v.extract(),
        Some(v) => Err(type_error(format!(
            "{keyword} must be a str, got {}",
            type_name(v)
        ))),
    }
}

/// `duration`: seconds, an int or a float.
fn seconds(v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if !(v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>())
        || v.is_instance_of::<PyBool>()
    {
        return Err(type_error(format!(
            "duration must be a number of seconds (int or float), got {}",
            type_name(v)
        )));
    }
    let s: f64 = v.extract()?;
    Duration::try_from_secs_f64(s).map_err(|_| {
        value_error(format!(
            "duration must be a finite number of seconds >= 0, got {v}"
        ))
    })
}

/// One of `names` (`-` and `_` alike), or a ValueError listing them.
fn choice<T: Copy>(keyword: &str, given: &str, names: &[(&str, T)]) -> PyResult<T> {
    let wanted = given.replace('_', "-");
    names
        .iter()
        .find(|(n, _)| *n == wanted)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let all: Vec<String> = names.iter().map(|(n, _)| format!("'{n}'")).collect();
            value_error(format!(
                "{keyword} must be one of {}, got {given:?}",
                all.join(", ")
            ))
        })
}

/// A count the kernel's tables take (a u32 of at least 1).
fn table_size(keyword: &str, n: i64) -> PyResult<u32> {
    u32::try_from(n).ok().filter(|&n| n >= 1).ok_or_else(|| {
        value_error(format!(
            "{keyword} must be between 1 and 4294967295, got {n}"
        ))
    })
}

/// Edit distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// The TypeError for keywords `query()` does not take, with the nearest
/// one it does and the list of all.
fn unknown_keywords(unknown: &Bound<'_, PyDict>) -> PyResult<PyErr> {
    let names: Vec<String> = unknown
        .keys()
        .iter()
        .map(|k| k.extract::<String>())
        .collect::<PyResult<_>>()?;
    let first = &names[0];
    let norm = first.replace('-', "_").to_lowercase();
    let near = KEYWORDS
        .iter()
        .map(|k| (distance(&norm, k), *k))
        .filter(|(d, k)| *d <= 2 || k.starts_with(norm.as_str()) || norm.starts_with(k))
        .min();
    let mut text = if names.len() == 1 {
        format!("query() got an unexpected keyword argument '{first}'")
    } else {
        format!(
            "query() got unexpected keyword arguments {}",
            names
                .iter()
                .map(|n| format!("'{n}'"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    if let Some((_, k)) = near {
        text.push_str(&format!(" (did you mean '{k}'?)"));
    }
    text.push_str(&format!(
        "; it takes: {} (see help(ebql.query))",
        KEYWORDS.join(", ")
    ));
    Ok(PyTypeError::new_err(text))
}

/// A path or string argument as a `str` (`os.fspath`).
fn path_str(keyword: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    let os = v.py().import("os")?;
    let p = os.call_method1("fspath", (v,)).map_err(|_| {
        PyTypeError::new_err(format!(
            "{keyword} must be a str or os.PathLike, got {}",
            type_name(v)
        ))
    })?;
    p.extract::<String>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{keyword} must be a str or os.PathLike of str, got {}",
            type_name(v)
        ))
    })
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `command=`: a list (or tuple) of arguments, or one string split as a
/// POSIX shell would (Python's `shlex.split`, as the CLI's `-c`), not run by one.
fn command_argv(v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let argv: Vec<String> = if v.is_instance_of::<PyString>() {
        let line: String = v.extract()?;
        let split = v.py().import("shlex")?.call_method1("split", (line,));
        split
            .map_err(|e| value_error(format!("command: cannot split {v}: {e}")))?
            .extract()?
    } else if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        v.try_iter()?
            .map(|a| path_str("each argument of command", &a?))
            .collect::<PyResult<_>>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "command must be a list of arguments or a string, got {}",
            type_name(v)
        )));
    };
    if argv.is_empty() {
        return Err(value_error("command is empty".into()));
    }
    Ok(argv)
}

/// Checks the keywords and makes the engine's options from them.
pub(crate) fn check(k: Keywords<'_>) -> PyResult<Checked> {
    if let Some(unknown) = k.unknown.as_ref().filter(|u| !u.is_empty()) {
        return Err(unknown_keywords(unknown)?);
    }
    let duration = k.duration.as_ref().map(seconds).transpose()?;
    let pid = match k.pid.as_ref() {
        None => None,
        Some(v) => {
            let p = integer("pid", Some(v), 0)?;
            let pid = u32::try_from(p).ok().filter(|&p| p >= 1);
            Some(pid.ok_or_else(|| value_error(format!("pid must be a process id >= 1, got {p}")))?)
        }
    };
    let command = k.command.as_ref().map(command_argv).transpose()?;
    let cgroup = k
        .cgroup
        .as_ref()
        .map(|c| path_str("cgroup", c))
        .transpose()?;
    let given: Vec<&str> = [
        ("pid", pid.is_some()),
        ("command", command.is_some()),
        ("cgroup", cgroup.is_some()),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| *n)
    .collect();
    if given.len() > 1 {
        return Err(value_error(format!(
            "{} cannot be given together: the query traces one process (pid), \
             one command it starts (command) or one cgroup (cgroup)",
            given.join(" and ")
        )));
    }
    let follow = flag("follow", k.follow.as_ref())?;
    if follow && command.is_none() {
        return Err(value_error(
            "follow=True needs command=: it traces the command's descendants too".into(),
        ));
    }
    let mut options = ExecutorOptions {
        bpf_stats: flag("bpf_stats", k.bpf_stats.as_ref())?,
        attach_only: flag("attach_only", k.attach_only.as_ref())?,
        align_windows: flag("align_windows", k.align_windows.as_ref())?,
        ..Default::default()
    };
    let id = |keyword: &str, v: Option<&Bound<'_, PyAny>>| -> PyResult<Option<String>> {
        v.map(|_| text(keyword, v, "")).transpose()
    };
    let (host_id, query_id) = (
        id("host_id", k.host_id.as_ref())?,
        id("query_id", k.query_id.as_ref())?,
    );
    if flag("partial", k.partial.as_ref())? {
        options.partial = Some(ebql::partial::PartialOptions { host_id, query_id });
    } else if host_id.is_some() || query_id.is_some() {
        return Err(value_error(
            "host_id and query_id name the rows of partial=True: give it too".into(),
        ));
    }
    options.codegen.max_groups = table_size(
        "max_groups",
        integer("max_groups", k.max_groups.as_ref(), 10240)?,
    )?;
    options.codegen.max_distinct = table_size(
        "max_distinct",
        integer("max_distinct", k.max_distinct.as_ref(), 256 << 10)?,
    )?;
    options.codegen.faulting_user_strings =
        !flag("no_faulting_reads", k.no_faulting_reads.as_ref())?;
    let c = &mut options.codegen.choices;
    c.hook = choice(
        "hook",
        &text("hook", k.hook.as_ref(), "auto")?,
        &[
            ("auto", HookChoice::Auto),
            ("tracefs", HookChoice::Tracefs),
            ("raw", HookChoice::Raw),
            ("raw-tp", HookChoice::RawTp),
        ],
    )?;
    c.optimize = choice(
        "optimize",
        &text("optimize", k.optimize.as_ref(), "total")?,
        &[
            ("total", Optimize::Total),
            ("traced", Optimize::Traced),
            ("host", Optimize::Host),
        ],
    )?;
    c.group_map = choice(
        "group_map",
        &text("group_map", k.group_map.as_ref(), "auto")?,
        &[
            ("auto", GroupMapChoice::Auto),
            ("hash", GroupMapChoice::Hash),
            ("array", GroupMapChoice::Array),
        ],
    )?;
    c.aggregate = choice(
        "aggregate",
        &text("aggregate", k.aggregate.as_ref(), "auto")?,
        &[
            ("auto", AggregateChoice::Auto),
            ("kernel", AggregateChoice::Kernel),
            ("user", AggregateChoice::User),
        ],
    )?;
    // The hook rule reads the cost model: calibrated on this machine when
    // `ebql calibrate` has run, the built-in defaults otherwise (as the CLI).
    let h = ebql::cost::load().model.syscall_hook_costs();
    c.hook_costs = HookCosts {
        tracefs_traced_ns: h.tracefs_traced_ns,
        tracefs_untraced_ns: h.tracefs_untraced_ns,
        raw_traced_ns: h.raw_traced_ns,
        raw_untraced_ns: h.raw_untraced_ns,
    };
    let sample_ms = integer("sample_ms", k.sample_ms.as_ref(), 100)?;
    let sample_ms = u64::try_from(sample_ms)
        .map_err(|_| value_error(format!("sample_ms must be >= 0, got {sample_ms}")))?;
    let sample = Some(Duration::from_millis(sample_ms)).filter(|d| !d.is_zero());
    (options.sample_rates, options.record_rates) = if flag("sample_first", k.sample_first.as_ref())?
    {
        (sample, None)
    } else {
        (None, sample)
    };
    Ok(Checked {
        options,
        duration,
        command,
        follow,
        pid,
        cgroup,
    })
}
