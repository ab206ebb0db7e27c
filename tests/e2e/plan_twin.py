"""A `pulumi` wrapper for the approval tests: `plan_twin.py CLI ARGS...` runs CLI with ARGS;
after a successful `--save-plan=FILE` it rewrites FILE as a program under review could: an
empty "resourcePlans" first, the real plans renamed "ResourcePlans".  The pulumi CLI's Go
decoder reads the last spelling, cJSON the first, so a controller that reads the plan
loosely sees no changes where the CLI applies them.  Used through the world's wrapper
(stack_fixtures.WRAPPER, env PCTEST_PLAN_TWIN) by test_stack_approval.py, and as the pods'
`pulumi` by test_stack_job_approval.py.  With PCTEST_PLAN_TWIN=Steps it renames instead every
changing resource's "steps" "Steps": one spelling only, which Go decodes as "steps" and a
case-sensitive reader misses (no changes)."""
import json
import os
import subprocess
import sys


def twin(text):
    text = text.replace('"resourcePlans"', '"ResourcePlans"', 1).lstrip()
    return '{"resourcePlans": {}, ' + text[1:]


def wrong_case_steps(text):
    doc = json.loads(text)
    for urn, rp in doc["resourcePlans"].items():
        if any(s != "same" for s in rp.get("steps", [])):
            doc["resourcePlans"][urn] = {("Steps" if k == "steps" else k): v for k, v in rp.items()}
    return json.dumps(doc)


def main():
    binary, args = sys.argv[1], sys.argv[2:]
    rc = subprocess.call([binary] + args)
    saved = [a[len("--save-plan="):] for a in args if a.startswith("--save-plan=")]
    if rc == 0 and saved and os.path.exists(saved[0]):
        with open(saved[0], encoding="utf-8") as fh:
            text = fh.read()
        rewrite = wrong_case_steps if os.environ.get("PCTEST_PLAN_TWIN") == "Steps" else twin
        with open(saved[0], "w", encoding="utf-8") as fh:
            fh.write(rewrite(text))
    return rc


if __name__ == "__main__":
    sys.exit(main())
