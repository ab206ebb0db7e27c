// pulumi-resource-standin: a real Pulumi resource provider implementing the
// stand-in CLI's simulated cloud, so the same Pulumi YAML programs run under
// the real pulumi CLI and under tests/e2e/pulumi_standin/pulumi.
//
// The real CLI offline can only run programs whose providers are installed,
// and drift tests need resources whose real state a test can change behind
// Pulumi's back.  This provider keeps one file per resource in the directory
// named by PULUMI_STANDIN_CLOUD (as the stand-in does), so a test makes drift
// by editing or deleting a file and sees it with `refresh` / `preview --refresh`.
//
// Package "standin", one resource type, with the stand-in's semantics:
//
//	standin:index:File  inputs  content (string, required), name (string, optional;
//	                            changing it replaces the resource)
//	                    outputs content, name ("" when not given), path, size (bytes)
//	                    id      "<name or resource name>-<8 hex digits>"
//	                    file    $PULUMI_STANDIN_CLOUD/files/<id>, holding content
//
// Fault knobs (environment, test-only), named as the stand-in CLI's knobs where the
// meaning is the same, so one test drives both CLIs.  <cmd> names the pulumi command
// whose provider calls are affected: "up" (Create/Update applied), "preview"
// (Create/Update previewed), "destroy" (Delete), "refresh" (Read).
//
//	PULUMI_STANDIN_SLOW_MS=<ms>      sleep before each resource call; a cancel (the
//	                                 engine's Cancel RPC or the call's context) ends it
//	PULUMI_STANDIN_HANG=<cmd>        <cmd>'s first resource call hangs until the engine
//	                                 cancels: after the Cancel RPC (the CLI got SIGINT)
//	                                 the call completes and the update ends "canceled";
//	                                 when the call's gRPC context ends (SIGTERM, or the
//	                                 CLI died) it fails without touching the cloud
//	PULUMI_STANDIN_HANG_STUBBORN=1   the hang ignores both, and the provider ignores
//	                                 SIGINT and SIGTERM: only SIGKILL ends it
//	PULUMI_STANDIN_PIDFILE=F         the hang writes {"pid","pgid","child","plugins"} to
//	                                 F: the CLI (this provider's parent), the CLI's
//	                                 process group, this provider, and every child of
//	                                 the CLI (language host, providers)
//	PULUMI_STANDIN_CRASH=<cmd>:<n>   <cmd>'s resource call after the first n SIGKILLs
//	                                 the CLI (a real crash mid-update: the lock and the
//	                                 pending operation stay) and waits to be cancelled
//
// Unlike the stand-in, the real CLI starts every plugin in a process group of its own.
//
// Built by scripts/deps-real.sh into .real/bin and installed as a plugin in the
// prepared PULUMI_HOME (.real/pulumi-home/plugins/resource-standin-v<version>).
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/provider"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

// version is overwritten at link time (-X main.version=...) from versions.env.
var version = "0.1.0"

const fileType = "standin:index:File"

// cloudEnv names the simulated cloud's directory, as for the stand-in.
const cloudEnv = "PULUMI_STANDIN_CLOUD"

// unknown is the engine's sentinel for a value not known during preview.
const unknown = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

type standin struct {
	pulumirpc.UnimplementedResourceProviderServer

	canceled   chan struct{} // closed by the engine's Cancel RPC
	cancelOnce sync.Once
	mu         sync.Mutex
	calls      map[string]int // resource calls so far, per command (PULUMI_STANDIN_CRASH)
}

func main() {
	err := provider.Main("standin", func(*provider.HostClient) (pulumirpc.ResourceProviderServer, error) {
		return &standin{canceled: make(chan struct{}), calls: map[string]int{}}, nil
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "pulumi-resource-standin: %v\n", err)
		os.Exit(1)
	}
}

// schema is what the YAML language host asks for to type-check programs.
func schema() string {
	str := map[string]string{"type": "string"}
	doc := map[string]any{
		"name":     "standin",
		"version":  version,
		"provider": map[string]any{},
		"resources": map[string]any{
			fileType: map[string]any{
				"description":     "a file in the simulated cloud directory",
				"inputProperties": map[string]any{"name": str, "content": str},
				"requiredInputs":  []string{"content"},
				"properties": map[string]any{"name": str, "content": str, "path": str,
					"size": map[string]string{"type": "integer"}},
				"required": []string{"name", "content", "path", "size"},
			},
		},
	}
	out, _ := json.Marshal(doc)
	return string(out)
}

func (p *standin) GetPluginInfo(context.Context, *emptypb.Empty) (*pulumirpc.PluginInfo, error) {
	return &pulumirpc.PluginInfo{Version: version}, nil
}

func (p *standin) GetSchema(context.Context, *pulumirpc.GetSchemaRequest) (*pulumirpc.GetSchemaResponse, error) {
	return &pulumirpc.GetSchemaResponse{Schema: schema()}, nil
}

func (p *standin) CheckConfig(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	return &pulumirpc.CheckResponse{Inputs: req.GetNews()}, nil
}

func (p *standin) DiffConfig(context.Context, *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	return &pulumirpc.DiffResponse{Changes: pulumirpc.DiffResponse_DIFF_NONE}, nil
}

func (p *standin) Configure(context.Context, *pulumirpc.ConfigureRequest) (*pulumirpc.ConfigureResponse, error) {
	return &pulumirpc.ConfigureResponse{SupportsPreview: true}, nil
}

func (p *standin) Cancel(context.Context, *emptypb.Empty) (*emptypb.Empty, error) {
	p.cancelOnce.Do(func() { close(p.canceled) })
	return &emptypb.Empty{}, nil
}

// knobs applies the fault knobs to one resource call of pulumi command cmd; an error
// means the call must fail without touching the cloud.
func (p *standin) knobs(ctx context.Context, cmd string) error {
	if ms, err := strconv.Atoi(os.Getenv("PULUMI_STANDIN_SLOW_MS")); err == nil && ms > 0 {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-p.canceled:
			return status.Error(codes.Canceled, "canceled while slowed by PULUMI_STANDIN_SLOW_MS")
		case <-ctx.Done():
			return status.Error(codes.Canceled, "canceled while slowed by PULUMI_STANDIN_SLOW_MS")
		}
	}
	p.mu.Lock()
	p.calls[cmd]++
	n := p.calls[cmd]
	p.mu.Unlock()
	if crashCmd, after, ok := strings.Cut(os.Getenv("PULUMI_STANDIN_CRASH"), ":"); ok && crashCmd == cmd {
		if limit, err := strconv.Atoi(after); err == nil && n > limit {
			// The engine has recorded this call as a pending operation by now.
			syscall.Kill(os.Getppid(), syscall.SIGKILL)
			<-ctx.Done()
			return status.Error(codes.Unavailable, "the CLI was killed (PULUMI_STANDIN_CRASH)")
		}
	}
	if os.Getenv("PULUMI_STANDIN_HANG") == cmd && n == 1 {
		return p.hang(ctx)
	}
	return nil
}

func (p *standin) hang(ctx context.Context) error {
	stubborn := os.Getenv("PULUMI_STANDIN_HANG_STUBBORN") == "1"
	if stubborn {
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	}
	if path := os.Getenv("PULUMI_STANDIN_PIDFILE"); path != "" {
		if err := writePids(path); err != nil {
			return err
		}
	}
	if stubborn {
		select {}
	}
	select {
	case <-p.canceled:
		// A graceful cancel lets the call in flight finish, as a provider that cannot
		// abort its work does: the engine then stops and reports the update canceled
		// (a failing step would make it "failed", whatever the cancel).
		return nil
	case <-ctx.Done():
		return status.Error(codes.Canceled, "canceled while hanging (PULUMI_STANDIN_HANG)")
	}
}

// writePids records the process tree a test checks after the driver ended the CLI.
func writePids(path string) error {
	cli := os.Getppid()
	pgid, err := syscall.Getpgid(cli)
	if err != nil {
		return fmt.Errorf("process group of %d: %w", cli, err)
	}
	doc, _ := json.Marshal(map[string]any{"pid": cli, "pgid": pgid, "child": os.Getpid(),
		"plugins": childrenOf(cli)})
	return write(path, string(doc))
}

// childrenOf lists the processes whose parent is pid, from /proc/<n>/stat.
func childrenOf(pid int) []int {
	var kids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	return kids
}

// filesDir is <cloud>/files, created when missing (as the stand-in does).
func filesDir() (string, error) {
	dir := os.Getenv(cloudEnv)
	if dir == "" {
		return "", errors.New(cloudEnv + " is not set (the simulated cloud's directory)")
	}
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", files, err)
	}
	return files, nil
}

// urnParts returns the type and name of urn:pulumi:stack::project::type::name.
func urnParts(urn string) (typ, name string) {
	parts := strings.Split(urn, "::")
	if len(parts) < 4 {
		return "", ""
	}
	typ = parts[len(parts)-2]
	if i := strings.LastIndex(typ, "$"); i >= 0 {
		typ = typ[i+1:]
	}
	return typ, parts[len(parts)-1]
}

func field(s *structpb.Struct, key string) (string, bool) {
	v, ok := s.GetFields()[key]
	if !ok {
		return "", false
	}
	sv, isStr := v.GetKind().(*structpb.Value_StringValue)
	if !isStr {
		return "", false
	}
	return sv.StringValue, true
}

func (p *standin) Check(_ context.Context, req *pulumirpc.CheckRequest) (*pulumirpc.CheckResponse, error) {
	if typ, _ := urnParts(req.GetUrn()); typ != fileType {
		return nil, status.Errorf(codes.InvalidArgument, "unknown resource type %q", typ)
	}
	news := req.GetNews()
	var failures []*pulumirpc.CheckFailure
	if _, ok := field(news, "content"); !ok {
		failures = append(failures, &pulumirpc.CheckFailure{Property: "content",
			Reason: "missing required property 'content'"})
	}
	if v, present := news.GetFields()["name"]; present {
		if _, ok := v.GetKind().(*structpb.Value_StringValue); !ok {
			failures = append(failures, &pulumirpc.CheckFailure{Property: "name",
				Reason: "name must be a string"})
		}
	}
	return &pulumirpc.CheckResponse{Inputs: news, Failures: failures}, nil
}

func (p *standin) Diff(_ context.Context, req *pulumirpc.DiffRequest) (*pulumirpc.DiffResponse, error) {
	olds, news := req.GetOlds(), req.GetNews()
	var diffs, replaces []string
	detailed := map[string]*pulumirpc.PropertyDiff{}
	for _, key := range []string{"name", "content"} {
		o, _ := field(olds, key)
		n, _ := field(news, key)
		if o == n {
			continue
		}
		diffs = append(diffs, key)
		kind := pulumirpc.PropertyDiff_UPDATE
		if key == "name" {
			replaces = append(replaces, key)
			kind = pulumirpc.PropertyDiff_UPDATE_REPLACE
		}
		detailed[key] = &pulumirpc.PropertyDiff{Kind: kind, InputDiff: true}
	}
	changes := pulumirpc.DiffResponse_DIFF_NONE
	if len(diffs) > 0 {
		changes = pulumirpc.DiffResponse_DIFF_SOME
	}
	return &pulumirpc.DiffResponse{Changes: changes, Diffs: diffs, Replaces: replaces,
		DetailedDiff: detailed, HasDetailedDiff: true}, nil
}

func outputs(name, content, path string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"name":    structpb.NewStringValue(name),
		"content": structpb.NewStringValue(content),
		"path":    structpb.NewStringValue(path),
		"size":    structpb.NewNumberValue(float64(len(content))),
	}}
}

// write replaces the file atomically, so a reader never sees half of it.
func write(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

func validID(id string) bool {
	return validName.MatchString(id) && id != "." && id != ".."
}

func (p *standin) Create(ctx context.Context, req *pulumirpc.CreateRequest) (*pulumirpc.CreateResponse, error) {
	props := req.GetProperties()
	content, _ := field(props, "content")
	name, _ := field(props, "name")
	if name != "" && name != unknown && !validName.MatchString(name) {
		return nil, fmt.Errorf(`invalid file name "%s": only letters, digits, ".", "_" and "-" are allowed`, name)
	}
	if err := p.knobs(ctx, applyCmd(req.GetPreview())); err != nil {
		return nil, err
	}
	dir, err := filesDir()
	if err != nil {
		return nil, err
	}
	if req.GetPreview() {
		return &pulumirpc.CreateResponse{Properties: outputs(name, content, "")}, nil
	}
	base := name
	if base == "" {
		_, base = urnParts(req.GetUrn())
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	id := base + "-" + hex.EncodeToString(suffix[:])
	path := filepath.Join(dir, id)
	if err := write(path, content); err != nil {
		return nil, err
	}
	return &pulumirpc.CreateResponse{Id: id, Properties: outputs(name, content, path)}, nil
}

// applyCmd names the command a Create or Update belongs to, for the knobs.
func applyCmd(preview bool) string {
	if preview {
		return "preview"
	}
	return "up"
}

func (p *standin) Read(ctx context.Context, req *pulumirpc.ReadRequest) (*pulumirpc.ReadResponse, error) {
	id := req.GetId()
	if !validID(id) {
		return nil, fmt.Errorf("invalid id %q", id)
	}
	if err := p.knobs(ctx, "refresh"); err != nil {
		return nil, err
	}
	dir, err := filesDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &pulumirpc.ReadResponse{}, nil // gone: the engine drops it from the state
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	name, _ := field(req.GetProperties(), "name")
	inputs := &structpb.Struct{Fields: map[string]*structpb.Value{
		"content": structpb.NewStringValue(string(data)),
	}}
	if n, ok := req.GetInputs().GetFields()["name"]; ok {
		inputs.Fields["name"] = n
	}
	return &pulumirpc.ReadResponse{Id: id, Properties: outputs(name, string(data), path), Inputs: inputs}, nil
}

func (p *standin) Update(ctx context.Context, req *pulumirpc.UpdateRequest) (*pulumirpc.UpdateResponse, error) {
	id := req.GetId()
	if !validID(id) {
		return nil, fmt.Errorf("invalid id %q", id)
	}
	if err := p.knobs(ctx, applyCmd(req.GetPreview())); err != nil {
		return nil, err
	}
	news := req.GetNews()
	content, _ := field(news, "content")
	name, _ := field(news, "name")
	dir, err := filesDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id)
	if !req.GetPreview() {
		if err := write(path, content); err != nil {
			return nil, err
		}
	}
	return &pulumirpc.UpdateResponse{Properties: outputs(name, content, path)}, nil
}

func (p *standin) Delete(ctx context.Context, req *pulumirpc.DeleteRequest) (*emptypb.Empty, error) {
	id := req.GetId()
	if !validID(id) {
		return nil, fmt.Errorf("invalid id %q", id)
	}
	if err := p.knobs(ctx, "destroy"); err != nil {
		return nil, err
	}
	dir, err := filesDir()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, id)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("deleting %s: %w", path, err)
	}
	return &emptypb.Empty{}, nil
}
