//! `#[profiled]`: instruments an async fn for eventpipe-profiler's async profiler. Use it
//! through `eventpipe_profiler::futures::profiled`.

use proc_macro::TokenStream;
use quote::quote;
use syn::parse::Parser;
use syn::{parse_macro_input, ItemFn, LitStr};

/// Records every call of this async fn as a future of one frame, named by the fn's path as
/// the symbolizer names it (`my_crate::module::name`; a method with its type,
/// `my_crate::module::Type::name` or `<my_crate::Type as my_crate::Trait>::name`) or by
/// `#[profiled(name = "...")]`.
///
/// The body runs inside an instrumented future (as `tracing`'s `#[instrument]` does), so its
/// context is created when the call is first polled.
#[proc_macro_attribute]
pub fn profiled(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut name: Option<LitStr> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("name") {
            name = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error("expected `name = \"...\"`"))
        }
    });
    if let Err(e) = parser.parse(attr) {
        return e.to_compile_error().into();
    }
    let function = parse_macro_input!(item as ItemFn);
    if function.sig.asyncness.is_none() {
        return syn::Error::new_spanned(
            function.sig.fn_token,
            "#[profiled] instruments async fns; for other futures use `.profiled(\"name\")`",
        )
        .to_compile_error()
        .into();
    }
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = function;
    // An attribute on a method cannot see its impl's type; a marker declared inside the fn
    // has the fn's whole path as its type name, impl type included.
    // (Declared in the fn's body, not in the static's initializer, whose name would join
    // the path.)
    let (marker, site) = match name {
        Some(lit) => (
            quote!(),
            quote!(::eventpipe_profiler::futures::Site::new(
                #lit,
                ::core::file!(),
                ::core::line!()
            )),
        ),
        None => (
            quote! {
                struct __EventpipeProfiledFn;
                fn __eventpipe_profiled_path() -> &'static str {
                    ::core::any::type_name::<__EventpipeProfiledFn>()
                }
            },
            quote!(::eventpipe_profiler::futures::Site::of_fn(
                __eventpipe_profiled_path,
                ::core::file!(),
                ::core::line!()
            )),
        ),
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #marker
            static __EVENTPIPE_PROFILED_SITE: ::eventpipe_profiler::futures::Site = #site;
            ::eventpipe_profiler::futures::Profiled::new(
                async move #block,
                &__EVENTPIPE_PROFILED_SITE,
            )
            .await
        }
    }
    .into()
}
