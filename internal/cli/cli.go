// Package cli runs a command made of subcommands, as cmd/bft and
// cmd/coord are: it picks the subcommand, prints the usage where asked or
// wrong, and turns the subcommand's error into an exit status.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
)

// Exit statuses.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// ErrUsage marks an error in the command line: Run prints it with the
// usage text.
var ErrUsage = errors.New("usage")

// ErrReported marks a usage error that the flag package has already
// printed, which Run does not print again.
var ErrReported = fmt.Errorf("%w (reported)", ErrUsage)

// A Command is a subcommand: it runs with the arguments after its name.
type Command func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Run runs the subcommand args[0] of the command name with the rest of
// args and returns the exit status. usage is printed to stdout when help
// is asked for, to stderr with a usage error.
func Run(ctx context.Context, name, usage string, commands map[string]Command, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	var err error
	switch cmd, ok := commands[args[0]]; {
	case ok:
		err = cmd(ctx, args[1:], stdout, stderr)
	case args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		err = fmt.Errorf("%w: unknown command %q", ErrUsage, args[0])
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ErrReported):
		return ExitUsage
	case errors.Is(err, ErrUsage):
		fmt.Fprintf(stderr, "%s: %v\n%s", name, err, usage)
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return ExitFailure
	}
}

// ParseFlags parses the arguments of subcommand name of command program,
// whose usage text is usage: it makes a flag set that reports to stderr,
// lets define add its flags, and parses args, which must have no
// positional arguments. Its errors are flag.ErrHelp or wrap ErrUsage, as
// Run expects.
func ParseFlags(program, name, usage string, args []string, stderr io.Writer, define func(fs *flag.FlagSet)) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage, "\nflags of "+program+" "+name+":\n")
		fs.PrintDefaults()
	}
	define(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrReported, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: %s %s takes no arguments after its flags, got %q", ErrUsage, program, name, fs.Args())
	}
	return nil
}
