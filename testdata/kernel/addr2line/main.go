// Command addr2line prints, one per line in hex, the addresses at which
// testdata/kernel/vmlinux-debug.sh asks aarch64-linux-gnu-addr2line about a
// capture's printed frames: for every frame of every printed Call trace and
// printed shadow call stack copy (internal/kcapture's PrintedAddrs: return
// addresses), the call before it, return address - 4.
//
// It lives under testdata so the module's packages never link it; run it
// with `go run ./testdata/kernel/addr2line -capture testdata/kernel/NAME`.
package main

import (
	"flag"
	"fmt"
	"log"

	"github.com/unwindkit/unwindkit/internal/kcapture"
)

func main() {
	dir := flag.String("capture", "", "shipped capture directory (testdata/kernel/NAME)")
	flag.Parse()
	if *dir == "" {
		log.Fatal("usage: addr2line -capture testdata/kernel/NAME")
	}
	c, err := kcapture.OpenCapture(*dir)
	if err != nil {
		log.Fatal(err)
	}
	as, err := c.PrintedAddrs()
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range as {
		fmt.Printf("%#x\n", a-4)
	}
}
