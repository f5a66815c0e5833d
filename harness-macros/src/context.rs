//! `#[derive(Context)]`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident, Visibility};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Fixed,
    Agent,
    Run,
}

impl Phase {
    const ALL: [Phase; 3] = [Phase::Fixed, Phase::Agent, Phase::Run];

    fn word(self) -> &'static str {
        match self {
            Phase::Fixed => "fixed",
            Phase::Agent => "agent",
            Phase::Run => "run",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Phase::Fixed => "Fixed",
            Phase::Agent => "Agent",
            Phase::Run => "Run",
        }
    }

    fn given_to(self) -> &'static str {
        match self {
            Phase::Fixed => "`Harness::builder_with`",
            Phase::Agent => "`create_agent_with`",
            Phase::Run => "`agent.with(..)`",
        }
    }
}

struct Slot {
    ident: Ident,
    ty: syn::Type,
    vis: Visibility,
    phase: Phase,
    docs: Vec<syn::Attribute>,
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let (fields, unit) = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => (Some(&named.named), false),
            Fields::Unit => (None, true),
            Fields::Unnamed(_) => {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "Context can only be derived for a struct with named fields: \
                     each field is a slot that steps read by name",
                ));
            }
        },
        _ => {
            return Err(syn::Error::new(
                input.ident.span(),
                "Context can only be derived for a struct with named fields, not an enum or a union",
            ));
        }
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new(
            input.generics.span(),
            "Context cannot be derived for a generic struct; use concrete slot types",
        ));
    }

    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };
    let names = match phase_names(input) {
        Ok(n) => n,
        Err(e) => {
            push(e);
            [None, None, None]
        }
    };
    let mut slots = Vec::new();
    for field in fields.into_iter().flatten() {
        match slot_of(field) {
            Ok(slot) => slots.push(slot),
            Err(e) => push(e),
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }

    let name = &input.ident;
    let vis = &input.vis;
    let mut structs = Vec::new();
    let mut types = Vec::new();
    for (phase, rename) in Phase::ALL.into_iter().zip(names) {
        let of_phase: Vec<&Slot> = slots.iter().filter(|s| s.phase == phase).collect();
        if of_phase.is_empty() {
            types.push(quote!(()));
            continue;
        }
        let ident = rename.unwrap_or_else(|| format_ident!("{}{}", name, phase.suffix()));
        let doc = format!(
            "The {} slots of [`{name}`], given to {}.",
            phase.word(),
            phase.given_to()
        );
        let fields = of_phase.iter().map(|s| {
            let (ident, ty, vis, docs) = (&s.ident, &s.ty, &s.vis, &s.docs);
            let fallback = format!("The slot `{ident}`.");
            let docs = if docs.is_empty() {
                quote!(#[doc = #fallback])
            } else {
                quote!(#(#docs)*)
            };
            quote!(#docs #vis #ident: #ty,)
        });
        let debug_fields = of_phase.iter().map(|s| {
            let key = s.ident.to_string();
            let ty = &s.ty;
            quote!(.field(#key, &::core::any::type_name::<#ty>()))
        });
        let label = ident.to_string();
        structs.push(quote! {
            #[doc = #doc]
            #vis struct #ident {
                #(#fields)*
            }

            // Slot values are often clients holding secrets: names and types only.
            impl ::core::fmt::Debug for #ident {
                fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                    f.debug_struct(#label) #(#debug_fields)* .finish()
                }
            }
        });
        types.push(quote!(#ident));
    }
    let (fixed_ty, agent_ty, run_ty) = (&types[0], &types[1], &types[2]);

    let inits = slots.iter().map(|s| {
        let ident = &s.ident;
        match s.phase {
            Phase::Fixed => {
                quote_spanned!(s.ty.span()=> #ident: ::harness::slots::share(&fixed.#ident),)
            }
            Phase::Agent => {
                quote_spanned!(s.ty.span()=> #ident: ::harness::slots::share(&agent.#ident),)
            }
            Phase::Run => quote!(#ident: run.#ident,),
        }
    });
    let body = if unit {
        quote!(Self)
    } else {
        quote!(Self { #(#inits)* })
    };
    Ok(quote! {
        #(#structs)*

        impl ::harness::Context for #name {
            type Fixed = #fixed_ty;
            type Agent = #agent_ty;
            type Run = #run_ty;

            #[allow(unused_variables)]
            fn assemble(fixed: &#fixed_ty, agent: &#agent_ty, run: #run_ty) -> Self {
                #body
            }
        }
    })
}

/// Reads `#[context(fixed = Name, agent = Name, run = Name)]` on the struct.
fn phase_names(input: &DeriveInput) -> syn::Result<[Option<Ident>; 3]> {
    let mut names = [None, None, None];
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("context")) {
        attr.parse_nested_meta(|meta| {
            let Some(i) = Phase::ALL
                .iter()
                .position(|p| meta.path.is_ident(p.word()))
            else {
                return Err(meta.error(
                    "unknown context option; expected `fixed = Name`, `agent = Name` or `run = Name` \
                     (the names of the generated slot structs)",
                ));
            };
            names[i] = Some(meta.value()?.parse::<Ident>()?);
            Ok(())
        })?;
    }
    Ok(names)
}

fn slot_of(field: &syn::Field) -> syn::Result<Slot> {
    let ident = field
        .ident
        .clone()
        .ok_or_else(|| syn::Error::new(field.span(), "expected a named field"))?;
    let mut phase = None;
    for attr in field.attrs.iter().filter(|a| a.path().is_ident("slot")) {
        attr.parse_nested_meta(|meta| {
            let Some(p) = meta.path.get_ident() else {
                return Err(meta.error("expected `fixed`, `agent` or `run`"));
            };
            let Some(found) = Phase::ALL.into_iter().find(|ph| p == ph.word()) else {
                return Err(meta.error(format!(
                    "unknown slot phase `{p}`; expected `fixed` (given to the harness), \
                     `agent` (given to create_agent) or `run` (given to each run)"
                )));
            };
            if phase.is_some() {
                return Err(meta.error("a slot has exactly one phase"));
            }
            phase = Some(found);
            Ok(())
        })?;
    }
    let phase = phase.ok_or_else(|| {
        syn::Error::new(
            ident.span(),
            format!(
                "slot `{ident}` has no phase; add #[slot(fixed)], #[slot(agent)] or #[slot(run)]"
            ),
        )
    })?;
    let docs = field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect();
    Ok(Slot {
        ident,
        ty: field.ty.clone(),
        vis: field.vis.clone(),
        phase,
        docs,
    })
}
