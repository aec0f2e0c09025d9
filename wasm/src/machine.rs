//! `Machine`: an entity state machine with a version check (docs/design.md §8), so a browser app
//! can check a move locally before it sends it. The same rules as the store's
//! `transition`: `idem_core::machine`.

use crate::sys::Array;
use idem_core::machine::{self, Entity, EntityDecision, MachineSpec};
use wasm_bindgen::prelude::*;

use crate::js::{self, Builder, Fields};
use crate::types::{EntityInput, MachineDecision, MachineOptions};

/// States, the initial one, and the allowed moves, checked when made.
#[wasm_bindgen]
pub struct Machine {
    inner: idem_core::Machine,
}

#[wasm_bindgen]
impl Machine {
    /// A machine from `{ states, initial, moves }`: `moves` is an array of `[from, to]`.
    ///
    /// # Errors
    ///
    /// A malformed argument, or a machine that cannot work (an unknown state, a state or
    /// move listed twice, an empty name), named in the message.
    #[wasm_bindgen(constructor)]
    pub fn new(spec: MachineOptions) -> Result<Machine, JsError> {
        let spec: JsValue = spec.into();
        let fields = Fields::new("machine", &spec, &["states", "initial", "moves"])?;
        let states = strings(&fields.path("states"), fields.get("states"))?;
        let initial = fields.required_string("initial")?;
        let mut moves = Vec::new();
        let listed = fields.get("moves").unwrap_or_else(|| Array::new().into());
        if !Array::is_array(&listed) {
            return Err(js::invalid(
                &fields.path("moves"),
                "expected an array of [from, to] pairs",
            ));
        }
        for (i, pair) in listed.unchecked_ref::<Array>().iter().enumerate() {
            let at = format!("{}[{i}]", fields.path("moves"));
            let pair = strings(&at, Some(pair))?;
            let [from, to] = <[String; 2]>::try_from(pair)
                .map_err(|_| js::invalid(&at, "expected a [from, to] pair"))?;
            moves.push((from, to));
        }
        let inner = idem_core::Machine::new(MachineSpec {
            states,
            initial,
            moves,
        })
        .map_err(js::error)?;
        Ok(Machine { inner })
    }

    /// Decides the move of `current` (`null` for an entity that does not exist yet) to
    /// `to`, with the optimistic check `expectedVersion` (omit to skip it), at `nowMs`.
    /// Writes nothing: `decision` is `applied` (with the entity after the move),
    /// `already_there`, `illegal` (with `from` and `to`) or `version_mismatch` (with
    /// `expected` and `current`).
    ///
    /// # Errors
    ///
    /// A malformed entity, state or time.
    pub fn transition(
        &self,
        current: Option<EntityInput>,
        to: &str,
        expected_version: Option<f64>,
        now_ms: f64,
    ) -> Result<MachineDecision, JsError> {
        let current = current.map(entity).transpose()?;
        let expected = expected_version
            .map(|v| js::unsigned("expectedVersion", &JsValue::from_f64(v)))
            .transpose()?;
        let now = js::timestamp("nowMs", now_ms)?;
        let decision = machine::transition(&self.inner, current.as_ref(), to, expected, now);
        let decided = Builder::new();
        Ok(match decision {
            EntityDecision::Applied { entity } => decided
                .set("decision", "applied")
                .set("entity", view(&entity)),
            EntityDecision::AlreadyThere { entity } => decided
                .set("decision", "already_there")
                .set("entity", view(&entity)),
            EntityDecision::Illegal { from, to } => decided
                .set("decision", "illegal")
                .set("from", from)
                .set("to", to),
            EntityDecision::VersionMismatch { expected, current } => decided
                .set("decision", "version_mismatch")
                .set("expected", js::number(expected))
                .set("current", js::number(current)),
        }
        .build())
    }
}

/// An array of strings, named `field` in errors.
fn strings(field: &str, value: Option<JsValue>) -> Result<Vec<String>, JsError> {
    js::strings(
        field,
        &value.unwrap_or_default(),
        "expected an array of strings",
    )
}

/// `{ state, version, updatedAt }` from JS.
fn entity(value: EntityInput) -> Result<Entity, JsError> {
    let value: JsValue = value.into();
    let fields = Fields::new("current", &value, &["state", "version", "updatedAt"])?;
    let version = fields
        .unsigned("version")?
        .ok_or_else(|| js::invalid(&fields.path("version"), "missing, expected a number"))?;
    let updated_at = fields.unsigned("updatedAt")?.unwrap_or(0);
    Ok(Entity {
        state: fields.required_string("state")?,
        version,
        updated_at: idem_core::Timestamp(updated_at),
    })
}

fn view(entity: &Entity) -> JsValue {
    Builder::new()
        .set("state", entity.state.as_str())
        .set("version", js::number(entity.version))
        .set("updatedAt", js::number(entity.updated_at.as_millis()))
        .build()
}
