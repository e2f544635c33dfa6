"""Private implementation of jaxwarp. Import the public names from ``jaxwarp``."""
