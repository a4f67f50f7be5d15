"""The command line: flags grouped by setting, their validation, one module
per setting and the named presets. Algorithm lists come from the library's
registries."""
