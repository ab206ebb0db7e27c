"""A Python program as its users write it (__main__.py, requirements.txt,
Pulumi.yaml runtime python), run by the real CLI on the Python language host:
one File of the test provider (standin:index:File, a file in
$PULUMI_STANDIN_CLOUD/files) whose content is the config value `greeting`,
and the secret config value `password` as a secret output.  The provider has
no generated Python SDK, so the resource is declared by its type token, as a
program using any schema-less provider would."""
import pulumi


class File(pulumi.CustomResource):
    content: pulumi.Output[str]
    path: pulumi.Output[str]

    def __init__(self, name, content, opts=None):
        super().__init__("standin:index:File", name, {"content": content, "path": None}, opts)


config = pulumi.Config()
greeting = config.get("greeting") or "hello"
password = config.require_secret("password")

note = File("note", greeting)
pulumi.export("message", greeting)
pulumi.export("path", note.path)
pulumi.export("language", "python")
pulumi.export("secretOut", password)
