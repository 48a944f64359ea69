//! DataFusion integration for ooode (layer 5): providers, factory, registration.
