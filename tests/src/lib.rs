//! End-to-end tests: the three verification tiers over compiled steps.
