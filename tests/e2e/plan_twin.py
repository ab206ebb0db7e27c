"""A `pulumi` wrapper for the approval tests: `plan_twin.py CLI ARGS...` runs CLI with ARGS;
after a successful `--save-plan=FILE` it rewrites FILE as a program under review could: an
empty "resourcePlans" first, the real plans renamed "ResourcePlans".  The pulumi CLI's Go
decoder reads the last spelling, cJSON the first, so a controller that reads the plan
loosely sees no changes where the CLI applies them.  Used through the world's wrapper
(stack_fixtures.WRAPPER, env PCTEST_PLAN_TWIN) by test_stack_approval.py, and as the pods'
`pulumi` by test_stack_job_approval.py."""
import os
import subprocess
import sys


def main():
    binary, args = sys.argv[1], sys.argv[2:]
    rc = subprocess.call([binary] + args)
    saved = [a[len("--save-plan="):] for a in args if a.startswith("--save-plan=")]
    if rc == 0 and saved and os.path.exists(saved[0]):
        with open(saved[0], encoding="utf-8") as fh:
            text = fh.read().replace('"resourcePlans"', '"ResourcePlans"', 1).lstrip()
        with open(saved[0], "w", encoding="utf-8") as fh:
            fh.write('{"resourcePlans": {}, ' + text[1:])
    return rc


if __name__ == "__main__":
    sys.exit(main())
