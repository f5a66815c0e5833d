//! `#[derive(Context)]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Fields, Ident};

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let fields = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => &named.named,
            Fields::Unit => {
                return Ok(impl_context(input, &[]));
            }
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
    let mut slots = Vec::new();
    for field in fields {
        match slot_of(field) {
            Ok(slot) => slots.push(slot),
            Err(e) => match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }
    Ok(impl_context(input, &slots))
}

struct Slot {
    ident: Ident,
    ty: syn::Type,
    phase: Ident,
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
            let variant = match p.to_string().as_str() {
                "fixed" => "Fixed",
                "agent" => "Agent",
                "run" => "Run",
                other => {
                    return Err(meta.error(format!(
                        "unknown slot phase `{other}`; expected `fixed` (given to the harness), \
                         `agent` (given to create_agent) or `run` (given to agent.run)"
                    )));
                }
            };
            if phase.is_some() {
                return Err(meta.error("a slot has exactly one phase"));
            }
            phase = Some(Ident::new(variant, p.span()));
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
    Ok(Slot {
        ident,
        ty: field.ty.clone(),
        phase,
    })
}

fn impl_context(input: &DeriveInput, slots: &[Slot]) -> TokenStream {
    let name = &input.ident;
    let specs = slots.iter().map(|s| {
        let key = s.ident.to_string();
        let ty = &s.ty;
        let phase = &s.phase;
        quote_spanned! {ty.span()=>
            ::harness::slots::SlotSpec {
                name: #key,
                phase: ::harness::slots::Phase::#phase,
                type_name: ::core::any::type_name::<#ty>,
                type_id: ::core::any::TypeId::of::<#ty>,
            }
        }
    });
    let gets = slots.iter().map(|s| {
        let ident = &s.ident;
        let key = ident.to_string();
        let ty = &s.ty;
        let phase = &s.phase;
        quote_spanned! {ty.span()=>
            #ident: source.get::<#ty>(#key, ::harness::slots::Phase::#phase)?,
        }
    });
    let body = if slots.is_empty() {
        quote!(let _ = source; ::core::result::Result::Ok(Self {}))
    } else {
        quote!(::core::result::Result::Ok(Self { #(#gets)* }))
    };
    let body = if matches!(&input.data, Data::Struct(d) if matches!(d.fields, Fields::Unit)) {
        quote!(let _ = source; ::core::result::Result::Ok(Self))
    } else {
        body
    };
    quote! {
        impl ::harness::Context for #name {
            fn slots() -> &'static [::harness::slots::SlotSpec] {
                const SLOTS: &[::harness::slots::SlotSpec] = &[#(#specs),*];
                SLOTS
            }

            fn from_slots(
                source: &::harness::slots::SlotSource<'_>,
            ) -> ::core::result::Result<Self, ::harness::slots::SlotError> {
                #body
            }
        }
    }
}
