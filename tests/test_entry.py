"""A Ctrl-C while the console script imports the CLI is `Aborted.`, exit 130, no traceback."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def test_interrupt_during_the_cli_import_is_one_line():
    code = textwrap.dedent("""
        import sys
        class Interrupting:  # the import of goodhart_prof.cli is where the Ctrl-C lands
            def find_spec(self, name, path=None, target=None):
                if name == "goodhart_prof.cli":
                    raise KeyboardInterrupt
                return None
        sys.meta_path.insert(0, Interrupting())
        from goodhart_prof.entry import main
        main(["--version"])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr, proc.stdout) == (130, "Aborted.\n", "")


def test_the_entry_runs_the_cli():
    proc = subprocess.run([sys.executable, "-c", "from goodhart_prof.entry import main; main(['--version'])"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("goodhart-prof, version")


def test_the_console_script_is_the_entry():
    from importlib.metadata import entry_points
    scripts = {e.name: e.value for e in entry_points(group="console_scripts") if e.name == "goodhart-prof"}
    assert scripts == {"goodhart-prof": "goodhart_prof.entry:main"}
