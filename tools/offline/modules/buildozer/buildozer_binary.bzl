"""The `buildozer_binary` module extension bazel_tools uses, creating an empty repository offline."""

def _empty_repository_impl(repository_ctx):
    repository_ctx.file("BUILD.bazel", "# buildozer is not available offline.\n")

_empty_repository = repository_rule(implementation = _empty_repository_impl)

def _buildozer_binary_impl(_module_ctx):
    _empty_repository(name = "buildozer_binary")

buildozer_binary = module_extension(implementation = _buildozer_binary_impl)
