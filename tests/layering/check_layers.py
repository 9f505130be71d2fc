#!/usr/bin/env python3
"""The layering test: every #include of every source file against cmake/layers.txt, every source
file's length against the limit, and every layer header's opening summary.

Usage: check_layers.py SOURCE_DIR     checks the tree; exit 1 naming each violation
       check_layers.py --self-test    checks the checker on a small tree of its own
"""
import os
import re
import subprocess
import sys
import tempfile

MAX_LINES = 800
# A layer's header opens, right after its include guard's #define, with a summary of what it holds
# in at most this many comment lines (the reasoning goes to docs/).
MAX_SUMMARY_LINES = 8
SOURCE_SUFFIXES = ('.h', '.cc', '.cu', '.cuh')
# Folders outside the layers: their files may include any layer (and their length is checked).
UNLAYERED = {'tests', 'bench', 'examples'}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    """Returns ({layer: set of layers it may include}, {file: set of extra layers})."""
    layers, files = {}, {}
    for line in open(path, encoding='utf-8'):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        name, _, allowed = line.partition(':')
        name = name.strip()
        target = files if '/' in name else layers
        target[name] = set(allowed.split())
    for layer, allowed in layers.items():
        unknown = allowed - set(layers)
        if unknown:
            raise SystemExit(f'{path}: layer {layer} names unknown layers {sorted(unknown)}')
    return layers, files


def source_files(root):
    """The tree's source files, relative to root: git's files where root is a checkout."""
    try:
        listed = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                                cwd=root, capture_output=True, text=True, check=True).stdout.split()
        return sorted(p for p in listed
                      if p.endswith(SOURCE_SUFFIXES) and os.path.isfile(os.path.join(root, p)))
    except (OSError, subprocess.CalledProcessError):
        found = []
        for directory, subdirectories, names in os.walk(root):
            subdirectories[:] = [d for d in subdirectories
                                 if not d.startswith(('.', 'build'))]
            for name in names:
                if name.endswith(SOURCE_SUFFIXES):
                    found.append(os.path.relpath(os.path.join(directory, name), root))
        return sorted(found)


def summary_problem(path, lines):
    """None when the header opens with a summary of 1 to MAX_SUMMARY_LINES comment lines."""
    defines = [number for number, line in enumerate(lines) if line.startswith('#define LOOM_')]
    if not defines:
        return f'{path}: no include guard (#define LOOM_..._H_)'
    position = defines[0] + 1
    while position < len(lines) and not lines[position].strip():
        position += 1
    summary = 0
    while position + summary < len(lines) and lines[position + summary].startswith('//'):
        summary += 1
    if summary == 0:
        return (f'{path}: no summary: open with a comment of at most {MAX_SUMMARY_LINES} lines '
                'saying what the header holds, right after the include guard')
    if summary > MAX_SUMMARY_LINES:
        return (f'{path}: its opening comment has {summary} lines: keep the summary to '
                f'{MAX_SUMMARY_LINES} and move the reasoning to docs/')
    return None


def check(root):
    """Every violation in the tree under root, as lines naming the file."""
    layers, files = read_table(os.path.join(root, 'cmake', 'layers.txt'))
    problems = []
    for path in source_files(root):
        folder = path.split('/', 1)[0]
        if '/' not in path:
            problems.append(f'{path}: a source file outside every layer folder')
            continue
        with open(os.path.join(root, path), encoding='utf-8', errors='replace') as source:
            lines = source.readlines()
        if len(lines) > MAX_LINES:
            problems.append(f'{path}: {len(lines)} lines, over the limit of {MAX_LINES}: split it '
                            'along the concepts it holds')
        if folder in UNLAYERED:
            continue
        if folder not in layers:
            problems.append(f'{path}: folder {folder}/ is no layer of cmake/layers.txt')
            continue
        if path.endswith(('.h', '.cuh')):
            problem = summary_problem(path, lines)
            if problem:
                problems.append(problem)
        allowed = layers[folder] | files.get(path, set()) | {folder}
        for number, line in enumerate(lines, 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            included = match.group(1)
            included_folder = included.split('/', 1)[0]
            if '/' not in included or included_folder not in layers and \
                    included_folder not in UNLAYERED:
                continue  # a library's header, or one beside the file
            if included_folder not in allowed:
                problems.append(f'{path}:{number}: includes "{included}": layer {folder} may '
                                f'include only {", ".join(sorted(allowed - {folder})) or "itself"}')
    return problems


def self_test():
    """The checker finds each kind of violation, and passes a clean tree."""
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), 'w', encoding='utf-8') as out:
                out.write(text)
        write('cmake/layers.txt', 'core:\nruntime: core\ntransport: core\n'
              'transport/adapter.cc: runtime\n')
        write('core/a.h', '#ifndef LOOM_CORE_A_H_\n#define LOOM_CORE_A_H_\n\n// A.\n\n'
              '#include <vector>\n#include "absl/status/status.h"\n')
        write('runtime/b.cc', '#include "core/a.h"\n#include "runtime/c.h"\n')
        write('transport/adapter.cc', '#include "runtime/b.h"\n')
        write('tests/t.cc', '#include "runtime/b.h"\n')
        assert check(root) == [], check(root)
        write('core/bad.cc', '#include "runtime/b.h"\n')
        write('transport/other.cc', '\n#include "runtime/b.h"\n')
        write('runtime/long.cc', 'int x;\n' * (MAX_LINES + 1))
        write('stray/s.cc', '')
        write('runtime/bare.h', '#ifndef LOOM_RUNTIME_BARE_H_\n#define LOOM_RUNTIME_BARE_H_\n\nint x;\n')
        write('runtime/wordy.h', '#define LOOM_RUNTIME_WORDY_H_\n' + '// words\n' * 9)
        problems = '\n'.join(check(root))
        for expected in ('core/bad.cc:1: includes "runtime/b.h"', 'transport/other.cc:2',
                         'runtime/long.cc: 801 lines', 'folder stray/ is no layer',
                         'runtime/bare.h: no summary', 'runtime/wordy.h: its opening comment has 9'):
            assert expected in problems, f'missing {expected!r} in:\n{problems}'
        assert 'adapter.cc' not in problems, problems
    print('check_layers self-test passed')


def main():
    if sys.argv[1:] == ['--self-test']:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(sys.argv[1])
    for problem in problems:
        print(problem)
    if problems:
        print(f'{len(problems)} layering problem(s); the rules: cmake/layers.txt and '
              'docs/ARCHITECTURE.md', file=sys.stderr)
        return 1
    print('layering: every include follows cmake/layers.txt; no source file over '
          f'{MAX_LINES} lines; every header opens with a summary')
    return 0


if __name__ == '__main__':
    sys.exit(main())
