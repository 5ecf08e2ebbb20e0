//! The Pyroscope push: requests from profiles.
