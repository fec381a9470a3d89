//! The naive reference flattener the property tests hold the engine to (placeholder).
