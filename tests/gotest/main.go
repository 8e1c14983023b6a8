// Command gotest reads the `go test -json` streams of `make test`'s lanes,
// says each test's end as it comes, and at the end prints what failed or
// was skipped and the counts CI reads: "N passed, N failed, N skipped".
//
//	gotest follow LANE <stream >file   echo the stream to file, say each end
//	gotest summary FILE...             the failures, skips and counts
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
	// build-output and build-fail events name the package here.
	ImportPath string
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "follow":
		if len(os.Args) != 3 {
			usage()
		}
		if err := follow(os.Args[2], os.Stdin, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintf(os.Stderr, "gotest: %v\n", err)
			os.Exit(1)
		}
	case "summary":
		ok, err := summary(os.Args[2:], os.Stdout)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gotest: %v\n", err)
			os.Exit(1)
		}
		if !ok {
			os.Exit(1)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: gotest follow LANE <stream >file | gotest summary FILE...")
	os.Exit(2)
}

// follow copies the stream to out unchanged and tells progress each
// top-level test's and package's end, prefixed with the lane.
func follow(lane string, in io.Reader, out, progress io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if _, err := out.Write(append(line, '\n')); err != nil {
			return err
		}
		var e event
		if json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(progress, "%s: %s\n", lane, printable(string(line)))
			continue
		}
		switch {
		case e.Action == "build-fail":
			fmt.Fprintf(progress, "%s: build of %s failed\n", lane, e.ImportPath)
		case !ended(e.Action):
		case e.Test == "":
			fmt.Fprintf(progress, "%s: %-4s %s (%.1fs)\n", lane, strings.ToUpper(e.Action), e.Package, e.Elapsed)
		case !strings.Contains(e.Test, "/"):
			fmt.Fprintf(progress, "%s: --- %s: %s (%.1fs)\n", lane, strings.ToUpper(e.Action), e.Test, e.Elapsed)
		}
	}
	return sc.Err()
}

func ended(action string) bool { return action == "pass" || action == "fail" || action == "skip" }

// key names one test (or package, Test "") of one stream.
type key struct{ file, pkg, test string }

// summary prints the output of every failed test and package, the names
// of the skipped tests, and the counts of tests and subtests; ok is false
// when any failed or was skipped (under `make test` nothing skips).
func summary(files []string, w io.Writer) (ok bool, err error) {
	var passed, failed, skipped []key
	output := map[key][]string{}
	build := map[string][]string{} // a package's build output, by import path
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return false, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue
			}
			k := key{f, e.Package, e.Test}
			switch e.Action {
			case "output":
				output[k] = append(output[k], e.Output)
			case "build-output":
				build[e.ImportPath] = append(build[e.ImportPath], e.Output)
			case "pass":
				if e.Test != "" {
					passed = append(passed, k)
				}
			case "skip":
				if e.Test != "" {
					skipped = append(skipped, k)
				}
			case "fail":
				failed = append(failed, k)
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return false, fmt.Errorf("read %s: %w", f, err)
		}
	}
	nfail := 0
	for _, k := range failed {
		if k.test != "" {
			nfail++
		}
		// A failed test's output holds its subtests'; a failed package
		// says its own (a build failure, a panic, a timeout).
		if strings.Contains(k.test, "/") {
			continue
		}
		fmt.Fprintf(w, "=== FAILED %s %s\n", k.pkg, k.test)
		lines := output[k]
		if k.test == "" {
			for path, b := range build {
				if path == k.pkg || strings.HasPrefix(path, k.pkg+" ") {
					lines = append(slices.Clone(b), lines...)
				}
			}
		}
		for _, l := range lines {
			fmt.Fprint(w, printable(l))
		}
	}
	for _, k := range skipped {
		fmt.Fprintf(w, "=== SKIPPED %s %s\n", k.pkg, k.test)
		for _, l := range output[k] {
			fmt.Fprint(w, printable(l))
		}
	}
	// The package failures without a failed test (a build failure) count
	// as failures too: nothing of theirs ran.
	pkgOnly := 0
	for _, k := range failed {
		if k.test == "" && !slices.ContainsFunc(failed, func(o key) bool { return o.file == k.file && o.pkg == k.pkg && o.test != "" }) {
			pkgOnly++
		}
	}
	line := fmt.Sprintf("%d passed, %d failed", len(passed), nfail+pkgOnly)
	if len(skipped) > 0 {
		line += fmt.Sprintf(", %d skipped", len(skipped))
	}
	fmt.Fprintln(w, line)
	return nfail+pkgOnly == 0 && len(skipped) == 0, nil
}

// printable is s with every byte outside printable ASCII, tab and newline
// replaced by '?': test output holds what tests read from files and traffic.
func printable(s string) string {
	b := []byte(s)
	for i, c := range b {
		if (c < 0x20 && c != '\t' && c != '\n') || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
