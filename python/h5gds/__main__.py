"""``python -m h5gds info [--json]``: what ``h5gds info`` prints, for the installed package (its
extension module carries the driver; CUDA, cuFile, nvCOMP and the files they load from, settings,
the ``gds`` plugins on ``HDF5_PLUGIN_PATH``, and the verdict per path)."""

import argparse
import json
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m h5gds", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    info = commands.add_parser("info", help="what decides the path data takes here")
    info.add_argument("--json", action="store_true", help="the report as JSON (h5gds.info())")
    args = parser.parse_args(argv)
    import h5gds

    if args.json:
        print(json.dumps(h5gds.info(), indent=2))
    else:
        h5gds._nvidia.prepare()
        sys.stdout.write(h5gds._native.info_text(h5gds._native.__file__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
