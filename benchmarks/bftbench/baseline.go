package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// resolve finds b.rev in the repository of the working directory, and
// names b after its short hash unless -baseline-name did.
func (b *baseline) resolve(ctx context.Context) error {
	top, err := git(ctx, "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("-baseline %s: %w", b.rev, err)
	}
	full, err := git(ctx, "rev-parse", "--verify", "--end-of-options", b.rev+"^{commit}")
	if err != nil {
		return fmt.Errorf("-baseline %s: %w", b.rev, err)
	}
	out, err := git(ctx, "show", "-s", "--format=%h%n%s", full)
	if err != nil {
		return fmt.Errorf("-baseline %s: %w", b.rev, err)
	}
	short, subject, _ := strings.Cut(out, "\n")
	if b.name == "" {
		b.name = short
	}
	b.rev, b.repo = full, top
	b.desc = fmt.Sprintf("cmd/bft at %s (%s)", short, subject)
	return nil
}

// build writes the tree of b.rev into dir/tree, builds its cmd/bft as
// dir/bft (not in the tree, which has a directory bft), and sets b.bin.
// The go toolchain is the one this tree's build selects, so that the two
// builds differ in their source only; the tree is a module of its own
// (GOWORK=off), with the go.sum it had.
func (b *baseline) build(ctx context.Context, dir string, stderr io.Writer) error {
	tree := filepath.Join(dir, "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		return err
	}
	if err := extract(ctx, b.repo, b.rev, tree); err != nil {
		return fmt.Errorf("-baseline: %w", err)
	}
	toolchain := "local"
	if v, err := goVersion(ctx); err == nil {
		toolchain = v
	}
	bin := filepath.Join(dir, "bft")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/bft")
	build.Dir = tree
	build.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN="+toolchain)
	build.Stdout, build.Stderr = stderr, stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("-baseline: go build ./cmd/bft at %s: %w", b.name, err)
	}
	b.bin = bin
	b.desc += ", built with " + toolchain
	return nil
}

// extract writes the whole tree of rev of the repository whose top level
// is repo into dir: git archive rev | tar -x -C dir, in repo (in a
// subdirectory, git archive takes only that directory's part).
func extract(ctx context.Context, repo, rev, dir string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	var archiveErr, tarErr bytes.Buffer
	archive := exec.CommandContext(ctx, "git", "archive", "--format=tar", rev)
	archive.Dir, archive.Stdout, archive.Stderr = repo, w, &archiveErr
	tar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	tar.Stdin, tar.Stderr = r, &tarErr
	closePipe := func() {
		// Only the children hold the pipe then: if either dies, the
		// other sees the end of it.
		r.Close()
		w.Close()
	}
	if err := archive.Start(); err != nil {
		closePipe()
		return err
	}
	if err := tar.Start(); err != nil {
		closePipe()
		archive.Process.Kill()
		archive.Wait()
		return err
	}
	closePipe()
	if err := errors.Join(archive.Wait(), tar.Wait()); err != nil {
		return fmt.Errorf("git archive %s | tar -x: %w: %s", rev, err, strings.TrimSpace(archiveErr.String()+" "+tarErr.String()))
	}
	return nil
}

// releaseVersion matches the name of a released go toolchain.
var releaseVersion = regexp.MustCompile(`^go1\.[0-9]+(\.[0-9]+|rc[0-9]+)?$`)

// goVersion returns the go toolchain a build in the working directory
// runs, if it is a release that GOTOOLCHAIN can name.
func goVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(out))
	if !releaseVersion.MatchString(v) {
		return "", fmt.Errorf("go toolchain %q is not a release", v)
	}
	return v, nil
}

// git runs git with args in the working directory and returns its output,
// trimmed.
func git(ctx context.Context, args ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
