//! Provider presets and the provider list a session asks for.

use anyhow::{bail, Result};
use eventpipe_ipc::ProviderRequest;

/// A named set of providers, like `dotnet-trace --profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
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
}

/// The allocation profiler's provider, at its default sampling interval.
const RUST_ALLOCATIONS: &str = "EventPipeRs-Allocations:0:Informational:SampleInterval=524288";

const DOTNET_RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

fn specs(profile: Profile, is_rust: bool) -> Result<Vec<&'static str>> {
    Ok(match (profile, is_rust) {
        (Profile::Default, true) => vec!["*:0xFFFFFFFFFFFFFFFF:Verbose"],
        (Profile::CpuSampling | Profile::Default, false) => vec![
            "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:Informational",
            "Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:Informational",
        ],
        (Profile::Gc, false) => vec!["Microsoft-Windows-DotNETRuntime:0x1:Verbose"],
        (Profile::CpuSampling, true) => vec!["EventPipeRs-CpuSampler:0:Informational"],
        (Profile::Tracing, true) => vec!["*:0xFFFFFFFFFFFFFFFF:Informational"],
        (Profile::Tracing, false) => {
            bail!("the tracing profile is for Rust processes; name a .NET EventSource with --providers")
        }
        (Profile::Gc, true) => {
            bail!("the gc profile is for .NET processes; Rust processes have no {DOTNET_RUNTIME}")
        }
        (Profile::Alloc, true) => vec![RUST_ALLOCATIONS],
        (Profile::Async, true) => vec![
            "EventPipeRs-AsyncProfiler:0:Informational",
            "EventPipeRs-CpuSampler:0:Informational",
        ],
        (Profile::Async, false) => {
            bail!("the async profile is for Rust processes instrumented with eventpipe_profiler::futures")
        }
        (Profile::Alloc, false) => {
            bail!("the alloc profile is for Rust processes; for .NET use --profile gc")
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
pub(crate) fn silent_profilers(
    requested: &[String],
    events_by_provider: &std::collections::BTreeMap<String, u64>,
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
pub(crate) fn silent_providers(
    requested: &[String],
    events_by_provider: &std::collections::BTreeMap<String, u64>,
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

/// The providers for `config`: the profile's (or the default one when no provider is
/// named), then each `--providers` spec, a later spec replacing an earlier one's entry.
pub(crate) fn providers(config: &super::Config, is_rust: bool) -> Result<Vec<ProviderRequest>> {
    let profiles = match (config.profile.is_empty(), config.providers.is_empty()) {
        (true, true) => vec![Profile::Default],
        _ => config.profile.clone(),
    };
    let mut all: Vec<String> = Vec::new();
    for p in profiles {
        all.extend(specs(p, is_rust)?.into_iter().map(String::from));
    }
    all.extend(config.providers.iter().cloned());
    let mut out: Vec<ProviderRequest> = Vec::new();
    for spec in &all {
        let p = eventpipe::ProviderConfig::parse(spec)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::Config;
    use eventpipe_client::TargetSpec;

    fn config(profile: Option<Profile>, providers: &[&str]) -> Config {
        Config {
            target: TargetSpec::Pid(1),
            providers: providers.iter().map(|s| s.to_string()).collect(),
            profile: profile.into_iter().collect(),
            block: false,
            buffer_mb: 256,
            duration: None,
            rundown: true,
            output: None,
            v6: false,
            stacks: false,
            convert: Vec::new(),
        }
    }

    #[test]
    fn the_async_profile_enables_the_async_profiler_and_the_cpu_sampler() {
        let requests = providers(&config(Some(Profile::Async), &[]), true).unwrap();
        let names: Vec<&str> = requests.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            ["EventPipeRs-AsyncProfiler", "EventPipeRs-CpuSampler"]
        );
        assert!(providers(&config(Some(Profile::Async), &[]), false).is_err());
    }

    #[test]
    fn the_alloc_profile_enables_the_allocation_profiler() {
        let requests = providers(&config(Some(Profile::Alloc), &[]), true).unwrap();
        assert_eq!(requests.len(), 1);
        let r = &requests[0];
        assert_eq!(r.name, "EventPipeRs-Allocations");
        assert_eq!(r.level, 4);
        assert_eq!(r.keywords, 0);
        assert_eq!(r.arguments, "SampleInterval=524288");

        // A --providers entry for the same provider replaces the preset's.
        let requests = providers(
            &config(
                Some(Profile::Alloc),
                &["EventPipeRs-Allocations:0:5:SampleInterval=65536"],
            ),
            true,
        )
        .unwrap();
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].arguments, "SampleInterval=65536");

        let err = providers(&config(Some(Profile::Alloc), &[]), false).unwrap_err();
        assert!(err.to_string().contains("Rust processes"), "{err}");
    }

    #[test]
    fn cpu_sampling_is_the_sampler_alone_and_tracing_adds_the_spans() {
        let names = |profiles: Vec<Profile>, is_rust| -> Vec<(String, u32)> {
            let mut c = config(None, &[]);
            c.profile = profiles;
            providers(&c, is_rust)
                .unwrap()
                .into_iter()
                .map(|r| (r.name, r.level))
                .collect()
        };
        assert_eq!(
            names(vec![Profile::CpuSampling], true),
            [("EventPipeRs-CpuSampler".to_owned(), 4)]
        );
        assert_eq!(
            names(vec![Profile::CpuSampling, Profile::Tracing], true),
            [
                ("EventPipeRs-CpuSampler".to_owned(), 4),
                ("*".to_owned(), 4)
            ]
        );
        // .NET's cpu-sampling is dotnet-trace's: the sample profiler and the runtime.
        assert_eq!(names(vec![Profile::CpuSampling], false).len(), 2);
        let mut c = config(Some(Profile::Tracing), &[]);
        assert!(providers(&c, false).is_err());
        c.profile.clear();
        assert_eq!(
            providers(&c, true).unwrap()[0].level,
            5,
            "the default profile"
        );
    }

    #[test]
    fn silent_named_providers_are_said_with_the_global_filter_hint() {
        let counts = |pairs: &[(&str, u64)]| -> std::collections::BTreeMap<String, u64> {
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
