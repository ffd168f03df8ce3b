from bakery.cli import main

main()
