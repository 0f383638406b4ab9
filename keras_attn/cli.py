"""The `keras-attn` command line: the tour and the paper reproductions."""

import argparse
import sys

from keras_attn import reproduce, tour


def build_parser():
    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description="Self-attention layers for Keras 3: a guided tour and paper reproductions.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    tour_parser = commands.add_parser("tour", help="Train, export and reload a small model.")
    tour.add_arguments(tour_parser)
    tour_parser.set_defaults(run=tour.run)

    reproduce_parser = commands.add_parser("reproduce", help="Reproduce a paper's effect.")
    papers = reproduce_parser.add_subparsers(dest="paper", required=True)
    for name, module in sorted(reproduce.available().items()):
        paper_parser = papers.add_parser(name, help=module.HELP)
        paper_parser.add_argument(
            "--full", action="store_true", help="Run the documented full-size setting."
        )
        paper_parser.add_argument(
            "--out", default=f"results/{name}", help="Folder for the JSON and PNG results."
        )
        module.add_arguments(paper_parser)
        paper_parser.set_defaults(run=module.run)
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
