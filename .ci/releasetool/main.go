// Command releasetool is the part of the addrlimit release tooling that no
// maintained tool does. The scripts beside it are its entry points:
//
//	bash .ci/release VERSION     bump, tidy, check and print the tags to push
//	bash .ci/consumer-check      install every published module as a user would
//	bash .ci/api [--changelog]   API compatibility against the previous tags (gorelease)
//
// What it does, and why a maintained tool does not:
//   - modules, check, bump, tags: find the modules by their go.mod files, decide
//     which are published (isPublished), check and set the requirements between
//     them. OpenTelemetry's multimod does bump and tags, but from a hand-written
//     versions.yaml listing every module, a second list to keep in step with the
//     go.mod files; gorelease checks one module at a time, not the version they
//     share. This is x/mod/modfile and go/parser (package clauses only).
//   - proxy: a file-based module proxy holding the working tree as if tagged
//     (plus the previous tags, from git): .ci/consumer-check installs from it
//     before any tag exists, and gorelease loads siblings and base versions from
//     it. No tool builds one.
//   - api: the exported API as a stable one-declaration-a-line list for the
//     changelog. apidiff and gorelease print differences only and go doc prints
//     documentation; the Go project's own cmd/api (which does this) is not
//     installable.
//
// The version rule (which version an API change needs, compared with the
// previous tag) is gorelease's: .ci/api runs it on every published module.
//
// Usage (from any directory inside the repository; -root defaults to the
// top of the git checkout):
//
//	releasetool [-root DIR] modules          directory, module path and "published" or "unpublished", one module a line
//	releasetool [-root DIR] check            check the sibling requirements; print the version they declare
//	releasetool [-root DIR] bump VERSION     set every sibling requirement to VERSION, keeping the replaces
//	releasetool [-root DIR] tags VERSION     the tags that publish VERSION, root module first
//	releasetool [-root DIR] proxy [-tags] VERSION DIR
//	    write a file proxy with the published modules at VERSION; with -tags also their git tags (see writeProxy)
//	releasetool [-root DIR] api [-changelog FILE] [-check]
//	    print the API summary, or rewrite (check) its generated blocks in FILE (relative to the root)
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "releasetool:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("releasetool", flag.ContinueOnError)
	rootFlag := fs.String("root", "", "repository root (default: top of the git checkout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := repoRoot(*rootFlag)
	if err != nil {
		return err
	}
	mods, err := findModules(root)
	if err != nil {
		return err
	}
	args = fs.Args()
	if len(args) == 0 {
		return fmt.Errorf("no command; see the doc comment of .ci/releasetool/main.go")
	}
	cmd, args := args[0], args[1:]
	want := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("usage: releasetool %s %s", cmd, usage)
		}
		return nil
	}
	switch cmd {
	case "modules":
		if err := want(0, ""); err != nil {
			return err
		}
		for _, m := range mods {
			state := "unpublished"
			if m.Published {
				state = "published"
			}
			fmt.Printf("%s\t%s\t%s\n", m.Dir, m.Path, state)
		}
		return nil
	case "check":
		if err := want(0, ""); err != nil {
			return err
		}
		v, err := declaredVersion(mods)
		if err != nil {
			return err
		}
		fmt.Println(v)
		return nil
	case "bump":
		if err := want(1, "VERSION"); err != nil {
			return err
		}
		changed, err := bump(root, mods, args[0])
		if err != nil {
			return err
		}
		for _, dir := range changed {
			fmt.Println(dir)
		}
		return nil
	case "tags":
		if err := want(1, "VERSION"); err != nil {
			return err
		}
		if err := checkReleaseVersion(args[0]); err != nil {
			return err
		}
		for _, m := range published(mods) {
			fmt.Println(m.Tag(args[0]))
		}
		return nil
	case "proxy":
		pfs := flag.NewFlagSet("proxy", flag.ContinueOnError)
		tags := pfs.Bool("tags", false, "also the git tags of the published modules; VERSION unlisted")
		if err := pfs.Parse(args); err != nil {
			return err
		}
		if args = pfs.Args(); len(args) != 2 {
			return fmt.Errorf("usage: releasetool proxy [-tags] VERSION DIR")
		}
		return writeProxy(root, mods, args[0], args[1], *tags)
	case "api":
		afs := flag.NewFlagSet("api", flag.ContinueOnError)
		changelog := afs.String("changelog", "", "rewrite the generated API blocks of this changelog")
		check := afs.Bool("check", false, "with -changelog: only report whether the blocks are up to date")
		if err := afs.Parse(args); err != nil {
			return err
		}
		if *changelog != "" {
			file := *changelog
			if !filepath.IsAbs(file) {
				file = filepath.Join(root, file) // relative to the repository root
			}
			return changelogAPI(root, mods, file, !*check)
		}
		for i, m := range published(mods) {
			am, err := loadModule(filepath.Join(root, filepath.FromSlash(m.Dir)), m.Path)
			if err != nil {
				return err
			}
			if i > 0 {
				fmt.Println()
			}
			fmt.Print(apiSummary(am))
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// repoRoot returns dir made absolute, or the top of the git checkout that
// contains the working directory.
func repoRoot(dir string) (string, error) {
	if dir != "" {
		return filepath.Abs(dir)
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not inside a git checkout; pass -root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
