"""Tools: the declaration of a tool (schema, side-effect class, timeout, retries) and the
toolkit that registers tools and agents."""
