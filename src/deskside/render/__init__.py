"""Rendering a recipe into the files of a deployment (pure, byte-reproducible); the entry
point is `deskside.render.assemble.render`."""
