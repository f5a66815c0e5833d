//! `#[derive(HarnessState)]`.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Data, DeriveInput, Expr, Fields, Ident, Path, Type};

/// The reducers that need no path: `#[field(reduce = append)]`.
const BUILT_IN: [&str; 6] = ["replace", "append", "extend", "add", "max", "min"];

/// How one field merges an update into the state.
enum Reducer {
    Replace,
    /// A built-in other than `replace`, with the span of its name so that a
    /// type mismatch is reported on the attribute.
    BuiltIn(Ident),
    /// A user function `fn(&mut T, T)`.
    Custom(Path),
}

struct StateField {
    ident: Ident,
    ty: Type,
    default: Option<Expr>,
    reducer: Reducer,
    docs: Vec<syn::Attribute>,
}

pub(crate) fn expand(input: &DeriveInput) -> syn::Result<TokenStream> {
    let fields = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(named) => &named.named,
            _ => {
                return Err(syn::Error::new(
                    input.ident.span(),
                    "HarnessState can only be derived for a struct with named fields; \
                     each field is a part of the state with its own default and reducer",
                ));
            }
        },
        _ => {
            return Err(syn::Error::new(
                input.ident.span(),
                "HarnessState can only be derived for a struct with named fields, \
                 not for an enum or a union; wrap the enum in a struct field",
            ));
        }
    };
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new(
            input.generics.span(),
            "HarnessState cannot be derived for a generic struct; \
             use concrete field types (a type alias works)",
        ));
    }

    let mut errors: Option<syn::Error> = None;
    let mut push = |e: syn::Error| match &mut errors {
        Some(all) => all.combine(e),
        None => errors = Some(e),
    };

    let update_ident = match update_name(input) {
        Ok(name) => name.unwrap_or_else(|| format_ident!("{}Update", input.ident)),
        Err(e) => {
            push(e);
            format_ident!("{}Update", input.ident)
        }
    };

    let mut parsed = Vec::new();
    for field in fields {
        match parse_field(field) {
            Ok(f) => parsed.push(f),
            Err(e) => push(e),
        }
    }
    if let Some(e) = errors {
        return Err(e);
    }

    let name = &input.ident;
    let vis = &input.vis;
    let krate = quote!(::harness);

    let update_fields = parsed.iter().map(|f| {
        let ident = &f.ident;
        let ty = &f.ty;
        let docs = &f.docs;
        let fallback = format!("A new value for `{ident}`, merged by its reducer.");
        let docs = if docs.is_empty() {
            quote!(#[doc = #fallback])
        } else {
            quote!(#(#docs)*)
        };
        quote! {
            #docs
            #[serde(
                default,
                skip_serializing_if = "::core::option::Option::is_none",
                deserialize_with = "::harness::__private::present"
            )]
            pub #ident: ::core::option::Option<#ty>,
        }
    });

    let setters = parsed.iter().map(|f| {
        let ident = &f.ident;
        let ty = &f.ty;
        let doc =
            format!("Sets `{ident}` in this update; the field's reducer merges it into the state.");
        if is_string(ty) {
            quote! {
                #[doc = #doc]
                #[must_use]
                pub fn #ident(mut self, value: impl ::core::convert::Into<#ty>) -> Self {
                    self.#ident = ::core::option::Option::Some(value.into());
                    self
                }
            }
        } else {
            quote! {
                #[doc = #doc]
                #[must_use]
                pub fn #ident(mut self, value: #ty) -> Self {
                    self.#ident = ::core::option::Option::Some(value);
                    self
                }
            }
        }
    });

    let defaults = parsed.iter().map(|f| {
        let ident = &f.ident;
        let ty = &f.ty;
        match &f.default {
            Some(expr) => quote_spanned!(expr.span()=> #ident: #expr,),
            None => {
                quote_spanned!(ty.span()=> #ident: <#ty as ::core::default::Default>::default(),)
            }
        }
    });

    let applies = parsed.iter().map(|f| {
        let ident = &f.ident;
        let ty = &f.ty;
        let merge = match &f.reducer {
            Reducer::Replace => quote!(self.#ident = value;),
            Reducer::BuiltIn(r) => {
                match r.to_string().as_str() {
                    "append" => quote_spanned!(r.span()=> <#ty as #krate::state::reduce::Appendable>::append_from(&mut self.#ident, value);),
                    "extend" => quote_spanned!(r.span()=> <#ty as #krate::state::reduce::Extendable>::extend_from(&mut self.#ident, value);),
                    "add" => quote_spanned!(r.span()=> <#ty as #krate::state::reduce::Addable>::add_from(&mut self.#ident, value);),
                    "max" => quote_spanned!(r.span()=> <#ty as #krate::state::reduce::Comparable>::keep_max(&mut self.#ident, value);),
                    _ => quote_spanned!(r.span()=> <#ty as #krate::state::reduce::Comparable>::keep_min(&mut self.#ident, value);),
                }
            }
            Reducer::Custom(path) => quote_spanned! {path.span()=>
                let reduce: fn(&mut #ty, #ty) = #path;
                reduce(&mut self.#ident, value);
            },
        };
        quote! {
            if let ::core::option::Option::Some(value) = update.#ident {
                #merge
            }
        }
    });

    let infos = parsed.iter().map(|f| {
        let name = f.ident.to_string();
        let kind = match &f.reducer {
            Reducer::Replace => quote!(Replace),
            Reducer::BuiltIn(r) => match r.to_string().as_str() {
                "append" => quote!(Append),
                "extend" => quote!(Extend),
                "add" => quote!(Add),
                "max" => quote!(Max),
                _ => quote!(Min),
            },
            Reducer::Custom(_) => quote!(Custom),
        };
        quote!(#krate::state::FieldInfo { name: #name, reducer: #krate::state::ReducerKind::#kind },)
    });

    let writes = parsed.iter().map(|f| {
        let ident = &f.ident;
        let name = ident.to_string();
        quote! {
            if update.#ident.is_some() {
                written.push(#name);
            }
        }
    });

    let empties = parsed.iter().map(|f| {
        let ident = &f.ident;
        quote!(self.#ident.is_none())
    });

    let update_doc = format!(
        "A partial update of [`{name}`]: each field that is `Some` is merged into the state \
         by that field's reducer. Build one with [`{update_ident}::new`] and the setters, \
         or with `<{name} as HarnessState>::update()`."
    );

    Ok(quote! {
        #[doc = #update_doc]
        #[derive(
            ::core::clone::Clone,
            ::core::fmt::Debug,
            ::core::default::Default,
            #krate::__private::serde::Serialize,
            #krate::__private::serde::Deserialize,
            #krate::__private::schemars::JsonSchema,
        )]
        #[serde(crate = "::harness::__private::serde", deny_unknown_fields)]
        #[schemars(crate = "::harness::__private::schemars")]
        #vis struct #update_ident {
            #(#update_fields)*
        }

        impl #update_ident {
            /// An empty update: applying it changes nothing.
            #[must_use]
            pub fn new() -> Self {
                <Self as ::core::default::Default>::default()
            }

            /// Whether this update sets no field at all.
            pub fn is_empty(&self) -> bool {
                true #(&& #empties)*
            }

            #(#setters)*
        }

        impl ::core::default::Default for #name {
            fn default() -> Self {
                Self { #(#defaults)* }
            }
        }

        impl #krate::HarnessState for #name {
            type Update = #update_ident;

            fn apply(&mut self, update: #update_ident) {
                #(#applies)*
            }

            fn fields() -> ::core::option::Option<&'static [#krate::state::FieldInfo]> {
                ::core::option::Option::Some(&[#(#infos)*])
            }

            fn written(update: &#update_ident) -> ::std::vec::Vec<&'static str> {
                let mut written = ::std::vec::Vec::new();
                #(#writes)*
                written
            }
        }
    })
}

/// Reads `#[harness(update = Name)]` on the struct.
fn update_name(input: &DeriveInput) -> syn::Result<Option<Ident>> {
    let mut name = None;
    for attr in &input.attrs {
        if !attr.path().is_ident("harness") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("update") {
                name = Some(meta.value()?.parse::<Ident>()?);
                Ok(())
            } else {
                Err(meta.error("unknown harness option; the only one is `update = TypeName`"))
            }
        })?;
    }
    Ok(name)
}

fn parse_field(field: &syn::Field) -> syn::Result<StateField> {
    let ident = field
        .ident
        .clone()
        .ok_or_else(|| syn::Error::new(field.span(), "expected a named field"))?;
    if ident == "new" || ident == "is_empty" {
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "a state field cannot be named `{ident}`: the generated update type has a \
                 method of that name (`new`, `is_empty`) beside each field's setter; rename the field"
            ),
        ));
    }
    let mut default = None;
    let mut reducer = Reducer::Replace;
    for attr in &field.attrs {
        if !attr.path().is_ident("field") {
            continue;
        }
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("default") {
                default = Some(meta.value()?.parse::<Expr>()?);
                Ok(())
            } else if meta.path.is_ident("reduce") {
                let path: Path = meta.value()?.parse()?;
                reducer = parse_reducer(path)?;
                Ok(())
            } else {
                Err(meta
                    .error("unknown field option; expected `default = EXPR` or `reduce = REDUCER`"))
            }
        })?;
    }
    let docs = field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .cloned()
        .collect();
    Ok(StateField {
        ident,
        ty: field.ty.clone(),
        default,
        reducer,
        docs,
    })
}

fn parse_reducer(path: Path) -> syn::Result<Reducer> {
    let Some(ident) = path.get_ident() else {
        return Ok(Reducer::Custom(path));
    };
    let name = ident.to_string();
    if name == "replace" {
        return Ok(Reducer::Replace);
    }
    if BUILT_IN.contains(&name.as_str()) {
        return Ok(Reducer::BuiltIn(ident.clone()));
    }
    // A bare name close to a built-in is almost certainly a typo, and the
    // compiler's "cannot find function" would not say which reducers exist.
    if let Some(near) = BUILT_IN
        .iter()
        .find(|b| edit_distance(&name.to_lowercase(), b) <= 2)
    {
        return Err(syn::Error::new(
            ident.span(),
            format!(
                "unknown reducer `{name}`; did you mean `{near}`? \
                 The built-in reducers are {}; a custom reducer is a path to a `fn(&mut T, T)`",
                BUILT_IN.join(", ")
            ),
        ));
    }
    Ok(Reducer::Custom(path))
}

fn is_string(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && p.path.segments.last().is_some_and(|s| s.ident == "String" && s.arguments.is_empty()))
}

/// Levenshtein distance, for reducer-name suggestions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
