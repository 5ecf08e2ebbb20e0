//! What a trace session asks for: provider presets (`dotnet-trace --profile`), provider
//! specs (`Name[:Keywords[:Level[:FilterArgs]]]`), buffering and format, made into the
//! `CollectTracing` request a runtime takes; and, once a session has run, which of the
//! providers it named stayed silent and what the program is likely missing.

use std::collections::BTreeMap;

use eventpipe_ipc::command::{CollectTracing, FORMAT_NETTRACE, FORMAT_NETTRACE_V6};
use eventpipe_ipc::ProviderRequest;

/// Why a [`TraceRequest`] cannot be asked of a process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The preset is for the other kind of runtime.
    #[error("the {preset} profile is for {runtime}{}", if advice.is_empty() { String::new() } else { format!("; {advice}") })]
    WrongRuntime {
        /// The preset, as `--profile` names it.
        preset: &'static str,
        /// The processes it is for.
        runtime: &'static str,
        /// What to use instead ("" when nothing fits).
        advice: &'static str,
    },
    /// A provider spec does not parse.
    #[error(transparent)]
    Provider(#[from] eventpipe_core::Error),
    /// NetTrace V6 was asked of a .NET runtime.
    #[error(
        "--nettrace-version v6 needs an eventpipe-rs process; .NET runtimes stream NetTrace V4/V5"
    )]
    V6NeedsRust,
}

impl RequestError {
    fn wrong_runtime(preset: &'static str, runtime: &'static str, advice: &'static str) -> Self {
        RequestError::WrongRuntime {
            preset,
            runtime,
            advice,
        }
    }
}

/// A named set of providers, like `dotnet-trace --profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Preset {
    /// .NET: the sample profiler plus the runtime's default keywords (dotnet-trace's
    /// default). Rust: the CPU sampler alone (`EventPipeRs-CpuSampler`, 1 kHz; the program
    /// calls `eventpipe_profiler::cpu::register()`), with the rundown that names its code
    /// and threads; add `tracing` for spans.
    CpuSampling,
    /// Rust: every provider the program declares (its `tracing` spans and events among
    /// them) at Informational, all keywords; this project's profilers are not included.
    /// .NET: not available (name EventSources with --providers).
    Tracing,
    /// .NET: garbage collections and allocations (runtime GC keyword, verbose).
    Gc,
    /// Rust: every provider the program declares, all keywords, verbose. .NET: as
    /// cpu-sampling.
    Default,
    /// Rust: the allocation and heap profiler of programs that install
    /// `eventpipe_profiler::alloc::ProfiledAllocator` (`EventPipeRs-Allocations`, one sample
    /// per 512 KiB allocated on average; add
    /// `--providers EventPipeRs-Allocations:0:5:SampleInterval=BYTES` to change that).
    /// .NET: not available (use gc).
    Alloc,
    /// Rust: the async profiler (`EventPipeRs-AsyncProfiler`: futures instrumented with
    /// `eventpipe_profiler::futures`) with the CPU sampler at 1 kHz, so CPU samples show
    /// their async callstacks. .NET: not available.
    Async,
    /// Rust: the CPU sampler at 1 kHz with off-CPU stacks (`OffCpu=1`): besides CPU time,
    /// where each thread waited and how long (`eptrace convert --samples offcpu`,
    /// `eptrace analyze --offcpu`). .NET: as cpu-sampling, whose thread time already counts
    /// the time threads wait.
    OffCpu,
}

impl Preset {
    /// Every preset, in the order `--help` lists them.
    pub const ALL: [Preset; 7] = [
        Preset::CpuSampling,
        Preset::Tracing,
        Preset::Gc,
        Preset::Default,
        Preset::Alloc,
        Preset::Async,
        Preset::OffCpu,
    ];

    /// The preset's name, as `--profile` takes it (`cpu-sampling`).
    pub fn name(self) -> &'static str {
        match self {
            Preset::CpuSampling => "cpu-sampling",
            Preset::Tracing => "tracing",
            Preset::Gc => "gc",
            Preset::Default => "default",
            Preset::Alloc => "alloc",
            Preset::Async => "async",
            Preset::OffCpu => "off-cpu",
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A preset name that names none ([`Preset`]'s `FromStr`).
#[derive(Debug, thiserror::Error)]
#[error("unknown profile `{0}` (known: cpu-sampling, tracing, gc, default, alloc, async, off-cpu)")]
pub struct UnknownPreset(String);

impl std::str::FromStr for Preset {
    type Err = UnknownPreset;

    /// A preset by its name, in any case.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| UnknownPreset(name.to_owned()))
    }
}

/// The allocation profiler's provider, at its default sampling interval.
const RUST_ALLOCATIONS: &str = "EventPipeRs-Allocations:0:Informational:SampleInterval=524288";

fn specs(preset: Preset, is_rust: bool) -> Result<Vec<&'static str>, RequestError> {
    Ok(match (preset, is_rust) {
        (Preset::Default, true) => vec!["*:0xFFFFFFFFFFFFFFFF:Verbose"],
        (Preset::CpuSampling | Preset::Default | Preset::OffCpu, false) => vec![
            "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:Informational",
            "Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:Informational",
        ],
        (Preset::Gc, false) => vec!["Microsoft-Windows-DotNETRuntime:0x1:Verbose"],
        (Preset::CpuSampling, true) => vec!["EventPipeRs-CpuSampler:0:Informational"],
        (Preset::OffCpu, true) => vec!["EventPipeRs-CpuSampler:0:Informational:OffCpu=1"],
        (Preset::Tracing, true) => vec!["*:0xFFFFFFFFFFFFFFFF:Informational"],
        (Preset::Tracing, false) => {
            return Err(RequestError::wrong_runtime(
                "tracing",
                "Rust processes",
                "name a .NET EventSource with --providers",
            ))
        }
        (Preset::Gc, true) => {
            return Err(RequestError::wrong_runtime(
                "gc",
                ".NET processes",
                "Rust processes have no Microsoft-Windows-DotNETRuntime",
            ))
        }
        (Preset::Alloc, true) => vec![RUST_ALLOCATIONS],
        (Preset::Async, true) => vec![
            "EventPipeRs-AsyncProfiler:0:Informational",
            "EventPipeRs-CpuSampler:0:Informational",
        ],
        (Preset::Async, false) => {
            return Err(RequestError::wrong_runtime(
                "async",
                "Rust processes instrumented with eventpipe_profiler::futures",
                "",
            ))
        }
        (Preset::Alloc, false) => {
            return Err(RequestError::wrong_runtime(
                "alloc",
                "Rust processes",
                "for .NET use --profile gc",
            ))
        }
    })
}

/// The profilers a Rust program must set up itself: (provider, what it is, the line the
/// program is missing).
const RUST_PROFILERS: &[(&str, &str, &str)] = &[
    (
        "EventPipeRs-CpuSampler",
        "the CPU sampler",
        "`eventpipe_profiler::cpu::register();` at start-up",
    ),
    (
        "EventPipeRs-Allocations",
        "the allocation profiler",
        "`#[global_allocator] static A: eventpipe_profiler::alloc::ProfiledAllocator<std::alloc::System> \
         = eventpipe_profiler::alloc::ProfiledAllocator::new(std::alloc::System);` and \
         `eventpipe_profiler::alloc::register();` at start-up",
    ),
    (
        "EventPipeRs-AsyncProfiler",
        "the async profiler",
        "`eventpipe_profiler::futures::register();` at start-up (and futures marked \
         `#[profiled]`)",
    ),
];

/// A note for each profiler the session asked for by name that wrote no event: the program
/// has not set it up, and the note names what it is missing.
pub fn silent_profilers(
    requested: &[String],
    events_by_provider: &BTreeMap<String, u64>,
) -> Vec<String> {
    RUST_PROFILERS
        .iter()
        .filter(|(provider, _, _)| requested.iter().any(|r| r.eq_ignore_ascii_case(provider)))
        .filter(|(provider, _, _)| events_by_provider.get(*provider).copied().unwrap_or(0) == 0)
        .map(|(provider, what, missing)| {
            format!(
                "{provider} wrote no events: the program does not run {what}; it needs {missing}"
            )
        })
        .collect()
}

/// Providers a session gets whatever it asks for: the rundown's, and this project's
/// profilers' (named apart).
fn is_rundown_or_profiler(provider: &str) -> bool {
    provider.starts_with("EventPipeRs-") || provider == "Microsoft-DotNETCore-EventPipe"
}

/// What a `tracing` user most often misses when a provider stays silent.
const GLOBAL_FILTER_HINT: &str = "if it is a `tracing` target (`my_app::db` is the provider \
     `my_app-db`), a filter added to the subscriber as a layer of its own \
     (`registry().with(EnvFilter…)`) is global and disables its callsites before \
     EventPipeLayer sees them: give the filter to the layer it is for \
     (`fmt::layer().with_filter(EnvFilter…)`), as the guide's instrumentation page shows";

/// A note when providers the session named (a Rust program's own, not the profilers)
/// wrote nothing: the name may be wrong, or a global `tracing` filter drops them. With
/// `*`, when none of the program's own providers wrote anything.
pub fn silent_providers(
    requested: &[String],
    events_by_provider: &BTreeMap<String, u64>,
) -> Option<String> {
    let wrote = |name: &str| {
        events_by_provider
            .iter()
            .any(|(p, n)| *n > 0 && p.eq_ignore_ascii_case(name))
    };
    if requested.iter().any(|r| r == "*") {
        let own = events_by_provider
            .iter()
            .any(|(p, n)| *n > 0 && !is_rundown_or_profiler(p));
        return (!own).then(|| {
            format!(
                "none of the program's own providers wrote events (`*` asked for all of \
                 them): it wrote none in the session, or {GLOBAL_FILTER_HINT}"
            )
        });
    }
    let silent: Vec<&str> = requested
        .iter()
        .filter(|r| !is_rundown_or_profiler(r) && !wrote(r))
        .map(String::as_str)
        .collect();
    (!silent.is_empty()).then(|| {
        format!(
            "{} wrote no events: check the name (`--providers '*'` records every provider \
             the program declares, and `report` lists them), or {GLOBAL_FILTER_HINT}",
            silent.join(", ")
        )
    })
}

/// What a trace session asks of a process, before it is known to be Rust or .NET.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRequest {
    /// Presets merged before `providers` (none, and no providers: [`Preset::Default`]).
    pub presets: Vec<Preset>,
    /// Provider specs (`Name[:Keywords[:Level[:FilterArgs]]]`); a later spec replaces an
    /// earlier one's (or a preset's) entry for the same provider.
    pub providers: Vec<String>,
    /// Block mode: writers wait for the reader instead of dropping (`CollectTracing6`).
    pub block: bool,
    /// The session's buffer, in MB.
    pub buffer_mb: u32,
    /// A rundown at the end (modules and methods, for symbols).
    pub rundown: bool,
    /// NetTrace V6 (eventpipe-rs processes only).
    pub v6: bool,
    /// Stacks with every event (always on for .NET, whose sample profiler needs them).
    pub stacks: bool,
}

impl Default for TraceRequest {
    /// The default preset, 256 MB, Drop mode, with rundown, NetTrace V5.
    fn default() -> Self {
        TraceRequest {
            presets: Vec::new(),
            providers: Vec::new(),
            block: false,
            buffer_mb: 256,
            rundown: true,
            v6: false,
            stacks: false,
        }
    }
}

impl TraceRequest {
    /// The providers asked of a Rust (`is_rust`) or .NET process: the presets' (or the
    /// default one when no provider is named), then each provider spec, a later spec
    /// replacing an earlier one's entry.
    ///
    /// # Errors
    /// A preset that is not for this runtime, or a provider spec that does not parse.
    pub fn providers(&self, is_rust: bool) -> Result<Vec<ProviderRequest>, RequestError> {
        let presets = match (self.presets.is_empty(), self.providers.is_empty()) {
            (true, true) => vec![Preset::Default],
            _ => self.presets.clone(),
        };
        let mut all: Vec<String> = Vec::new();
        for p in presets {
            all.extend(specs(p, is_rust)?.into_iter().map(String::from));
        }
        all.extend(self.providers.iter().cloned());
        let mut out: Vec<ProviderRequest> = Vec::new();
        for spec in &all {
            let p = eventpipe_core::ProviderConfig::parse(spec)?;
            let request = ProviderRequest {
                keywords: p.keywords,
                level: p.level as u32,
                name: p.name,
                arguments: p.filter_args.unwrap_or_default(),
                filter: None,
            };
            match out
                .iter_mut()
                .find(|r| r.name.eq_ignore_ascii_case(&request.name))
            {
                Some(existing) => *existing = request,
                None => out.push(request),
            }
        }
        Ok(out)
    }

    /// The `CollectTracing` request for a Rust (`is_rust`) or .NET process, asking for
    /// `providers` (from [`TraceRequest::providers`], perhaps edited).
    ///
    /// # Errors
    /// NetTrace V6 asked of .NET.
    pub fn collect_tracing(
        &self,
        is_rust: bool,
        providers: Vec<ProviderRequest>,
    ) -> Result<CollectTracing, RequestError> {
        if self.v6 && !is_rust {
            return Err(RequestError::V6NeedsRust);
        }
        // .NET Core 3.1 and .NET 8 know CollectTracing2; the buffering mode needs version 6.
        let version = if is_rust || self.block { 6 } else { 2 };
        Ok(CollectTracing {
            circular_buffer_mb: self.buffer_mb,
            format: if self.v6 {
                FORMAT_NETTRACE_V6
            } else {
                FORMAT_NETTRACE
            },
            rundown_keyword: if self.rundown {
                eventpipe_ipc::command::DEFAULT_RUNDOWN_KEYWORD
            } else {
                0
            },
            buffering_mode: u32::from(self.block),
            stackwalk: self.stacks || !is_rust,
            ..CollectTracing::new(version, providers)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(preset: Option<Preset>, providers: &[&str]) -> TraceRequest {
        TraceRequest {
            presets: preset.into_iter().collect(),
            providers: providers.iter().map(|s| s.to_string()).collect(),
            ..TraceRequest::default()
        }
    }

    #[test]
    fn presets_read_by_name_in_any_case_and_unknown_names_list_the_known() {
        for preset in Preset::ALL {
            assert_eq!(preset.name().parse::<Preset>().unwrap(), preset);
            assert_eq!(
                preset.name().to_uppercase().parse::<Preset>().unwrap(),
                preset
            );
        }
        let err = "cpu".parse::<Preset>().unwrap_err().to_string();
        for preset in Preset::ALL {
            assert!(err.contains(preset.name()), "{err}");
        }
    }

    /// The names are the ones `--profile` takes, and the list is complete.
    #[cfg(feature = "clap")]
    #[test]
    fn preset_names_are_the_command_lines() {
        use clap::ValueEnum;
        let clap_names: Vec<String> = Preset::value_variants()
            .iter()
            .map(|p| p.to_possible_value().unwrap().get_name().to_owned())
            .collect();
        let ours: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(clap_names, ours);
    }

    #[test]
    fn the_async_profile_enables_the_async_profiler_and_the_cpu_sampler() {
        let requests = config(Some(Preset::Async), &[]).providers(true).unwrap();
        let names: Vec<&str> = requests.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["EventPipeRs-AsyncProfiler", "EventPipeRs-CpuSampler"]
        );
        assert!(config(Some(Preset::Async), &[]).providers(false).is_err());
    }

    #[test]
    fn the_alloc_profile_enables_the_allocation_profiler() {
        let requests = config(Some(Preset::Alloc), &[]).providers(true).unwrap();
        assert_eq!(requests.len(), 1);
        let r = &requests[0];
        assert_eq!(r.name, "EventPipeRs-Allocations");
        assert_eq!(r.level, 4);
        assert_eq!(r.keywords, 0);
        assert_eq!(r.arguments, "SampleInterval=524288");

        // A --providers entry for the same provider replaces the preset's.
        let requests = config(
            Some(Preset::Alloc),
            &["EventPipeRs-Allocations:0:5:SampleInterval=65536"],
        )
        .providers(true)
        .unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].arguments, "SampleInterval=65536");

        let err = config(Some(Preset::Alloc), &[])
            .providers(false)
            .unwrap_err();
        assert!(err.to_string().contains("Rust processes"), "{err}");
    }

    #[test]
    fn cpu_sampling_is_the_sampler_alone_and_tracing_adds_the_spans() {
        let names = |profiles: Vec<Preset>, is_rust| -> Vec<(String, u32)> {
            let mut c = config(None, &[]);
            c.presets = profiles;
            c.providers(is_rust)
                .unwrap()
                .into_iter()
                .map(|r| (r.name, r.level))
                .collect()
        };
        assert_eq!(
            names(vec![Preset::CpuSampling], true),
            [("EventPipeRs-CpuSampler".to_owned(), 4)]
        );
        assert_eq!(
            names(vec![Preset::CpuSampling, Preset::Tracing], true),
            [
                ("EventPipeRs-CpuSampler".to_owned(), 4),
                ("*".to_owned(), 4)
            ]
        );
        // .NET's cpu-sampling is dotnet-trace's: the sample profiler and the runtime.
        assert_eq!(names(vec![Preset::CpuSampling], false).len(), 2);
        let mut c = config(Some(Preset::Tracing), &[]);
        assert!(c.providers(false).is_err());
        c.presets.clear();
        assert_eq!(
            c.providers(true).unwrap()[0].level,
            5,
            "the default profile"
        );
    }

    #[test]
    fn silent_named_providers_are_said_with_the_global_filter_hint() {
        let counts = |pairs: &[(&str, u64)]| -> BTreeMap<String, u64> {
            pairs.iter().map(|(p, n)| (p.to_string(), *n)).collect()
        };
        let rundown_only = counts(&[
            ("EventPipeRs-Rundown", 5),
            ("Microsoft-DotNETCore-EventPipe", 1),
        ]);
        let star = silent_providers(&["*".into()], &rundown_only).unwrap();
        assert!(star.contains("with_filter"), "{star}");
        let named = silent_providers(
            &[
                "mini_redis-server".into(),
                "Other".into(),
                "EventPipeRs-CpuSampler".into(),
            ],
            &counts(&[("Other", 3)]),
        )
        .unwrap();
        assert!(
            named.starts_with("mini_redis-server wrote no events"),
            "{named}"
        );
        assert!(
            !named.contains("Other") && !named.contains("CpuSampler"),
            "{named}"
        );
        // Providers that wrote say nothing.
        assert_eq!(
            silent_providers(&["*".into()], &counts(&[("my_app-db", 2)])),
            None
        );
        assert_eq!(
            silent_providers(&["other".into()], &counts(&[("Other", 2)])),
            None
        );
    }
}
