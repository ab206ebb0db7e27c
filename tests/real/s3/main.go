// s3-server: an S3-compatible object store on loopback for the conformance
// tests' Flux Bucket sources (tests/e2e/flux_fixtures.py starts it; scripts/
// deps-real.sh builds it into .real/bin).  It is a thin command around the
// in-memory backend of github.com/johannesboyne/gofakes3, which serves the
// calls source-controller's generic (minio-go) Bucket provider makes: the
// bucket location and HEAD, ListObjectsV2 and GetObject.  Tests upload objects
// with plain path-style PUTs; request signatures are not checked.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (port 0 picks a free one)")
	buckets := flag.String("buckets", "", "comma-separated buckets to create at start")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: s3-server [-addr HOST:PORT] [-buckets a,b]\n"+
			"Serves an in-memory S3 API; prints \"listening on HOST:PORT\" once ready.\n")
		flag.PrintDefaults()
	}
	flag.Parse()

	backend := s3mem.New()
	for _, name := range strings.Split(*buckets, ",") {
		if name == "" {
			continue
		}
		if err := backend.CreateBucket(name); err != nil {
			log.Fatalf("s3-server: creating bucket %q: %v", name, err)
		}
	}
	faker := gofakes3.New(backend, gofakes3.WithGlobalLog())

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("s3-server: listening on %s: %v", *addr, err)
	}
	// The harness reads this line to learn the port; stdout is line-buffered
	// only by convention, so it is written in one call.
	fmt.Printf("listening on %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, faker.Server()))
}
