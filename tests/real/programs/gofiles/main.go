// A Go program as its users write it (go.mod, go.sum, main.go, Pulumi.yaml
// runtime go), run by the real CLI on the Go language host: one File of the
// test provider (standin:index:File, a file in $PULUMI_STANDIN_CLOUD/files)
// whose content is the config value `greeting`, and the secret config value
// `password` as a secret output.  The provider has no generated Go SDK, so
// the resource is registered by its type token, as a program using any
// schema-less provider would.
package main

import (
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
)

// File is standin:index:File's state as the provider returns it.
type File struct {
	pulumi.CustomResourceState

	Content pulumi.StringOutput `pulumi:"content"`
	Path    pulumi.StringOutput `pulumi:"path"`
}

func main() {
	pulumi.Run(func(ctx *pulumi.Context) error {
		cfg := config.New(ctx, "")
		greeting := cfg.Get("greeting")
		if greeting == "" {
			greeting = "hello"
		}
		password := cfg.RequireSecret("password")

		var note File
		if err := ctx.RegisterResource("standin:index:File", "note",
			pulumi.Map{"content": pulumi.String(greeting)}, &note); err != nil {
			return err
		}
		ctx.Export("message", pulumi.String(greeting))
		ctx.Export("path", note.Path)
		ctx.Export("language", pulumi.String("go"))
		ctx.Export("secretOut", password)
		return nil
	})
}
