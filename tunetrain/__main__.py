from tunetrain.cli import run

run()
