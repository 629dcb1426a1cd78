"""Services: the logic behind the API, each on one concept, working on a store session."""
