# Writes cmd/invoke/testdata/sam-local-env.json: the environment `sam local invoke <Function>
# --env-vars events/env.docker.json` gives each function's container, as computed by the SAM
# CLI installed in .venv (make sam-tools; its version is recorded in the file). Credentials are
# SAM's placeholders (none configured) and the shell's environment is left out, so the file does
# not depend on the machine. The runtime interface emulator inside the container adds
# AWS_LAMBDA_RUNTIME_API and passes the rest through. cmd/invoke's TestDockerEnvVarsFile runs
# the functions' endpoint check on it. Regenerate after changing template.yaml's environment,
# events/env.docker.json or the pinned SAM CLI version; from the repository root:
#   .venv/bin/python cmd/invoke/testdata/sam-local-env.py
import json

from samcli import __version__
from samcli.commands.local.lib.local_lambda import LocalLambdaRunner
from samcli.lib.providers.sam_function_provider import SamFunctionProvider
from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

stacks, _ = SamLocalStackProvider.get_stacks("template.yaml")
provider = SamFunctionProvider(stacks)
runner = LocalLambdaRunner.__new__(LocalLambdaRunner)  # only _make_env_vars is used
runner.env_vars_values = json.load(open("events/env.docker.json"))
runner.get_aws_creds = lambda: {}
runner.is_debugging = lambda: False

out = {"samCliVersion": __version__, "functions": {}}
for fn in sorted(provider.get_all(), key=lambda f: f.name):
    env = runner._make_env_vars(fn)
    env.shell_env_values = {}
    out["functions"][fn.name] = dict(sorted(env.resolve().items()))
with open("cmd/invoke/testdata/sam-local-env.json", "w") as f:
    json.dump(out, f, indent=2)
    f.write("\n")
print("wrote cmd/invoke/testdata/sam-local-env.json (SAM CLI %s)" % __version__)
