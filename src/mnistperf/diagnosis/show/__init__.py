"""What a user reads of finished runs: the HTML report, two runs compared, their names, the commands that print them."""
