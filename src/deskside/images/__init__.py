"""The engine image on every node: which image each node's Docker holds for the recipe's
pinned reference (`held`, a fact), whether every node holds the head's (`check`, pure), and
`deskside image sync` (`sync`)."""
