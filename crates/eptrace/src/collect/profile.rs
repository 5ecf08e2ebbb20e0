//! Provider presets and the provider list a session asks for.

use anyhow::{bail, Result};
use eventpipe_ipc::ProviderRequest;

/// A named set of providers, like `dotnet-trace --profile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Profile {
    /// .NET: the sample profiler plus the runtime's default keywords (dotnet-trace's
    /// default). Rust: not available until the CPU sampler exists.
    CpuSampling,
    /// .NET: garbage collections and allocations (runtime GC keyword, verbose).
    Gc,
    /// Rust: every provider the program declares, all keywords, verbose. .NET: as
    /// cpu-sampling.
    Default,
}

const DOTNET_RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";

fn specs(profile: Profile, is_rust: bool) -> Result<Vec<&'static str>> {
    Ok(match (profile, is_rust) {
        (Profile::Default, true) => vec!["*:0xFFFFFFFFFFFFFFFF:Verbose"],
        (Profile::CpuSampling | Profile::Default, false) => vec![
            "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:Informational",
            "Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:Informational",
        ],
        (Profile::Gc, false) => vec!["Microsoft-Windows-DotNETRuntime:0x1:Verbose"],
        (Profile::CpuSampling, true) => {
            bail!("the cpu-sampling profile is not available for Rust processes yet")
        }
        (Profile::Gc, true) => {
            bail!("the gc profile is for .NET processes; Rust processes have no {DOTNET_RUNTIME}")
        }
    })
}

/// The providers for `config`: the profile's (or the default one when no provider is
/// named), then each `--providers` spec, a later spec replacing an earlier one's entry.
pub(crate) fn providers(config: &super::Config, is_rust: bool) -> Result<Vec<ProviderRequest>> {
    let profile = match (config.profile, config.providers.is_empty()) {
        (Some(p), _) => Some(p),
        (None, true) => Some(Profile::Default),
        (None, false) => None,
    };
    let mut all: Vec<String> = match profile {
        Some(p) => specs(p, is_rust)?.into_iter().map(String::from).collect(),
        None => Vec::new(),
    };
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
