-- Q9': TPC-H Q9's join graph (part -> lineitem -> partsupp, supplier -> nation, orders: profit
-- per nation and year): the part name pattern becomes a range of the part key (clustering
-- index): 0.5 % of parts at any scale factor ({sf} is replaced by the scale factor).
-- driving-table: part
-- driving-predicate: p_partkey <= CAST(1000 * {sf} AS BIGINT)
SELECT nation, o_year, SUM(amount) AS sum_profit
FROM (
  SELECT n_name AS nation, EXTRACT(YEAR FROM o_orderdate) AS o_year,
         l_extendedprice * (1 - l_discount) - ps_supplycost * l_quantity AS amount
  FROM part, supplier, lineitem, partsupp, orders, nation
  WHERE s_suppkey = l_suppkey
    AND ps_suppkey = l_suppkey
    AND ps_partkey = l_partkey
    AND p_partkey = l_partkey
    AND o_orderkey = l_orderkey
    AND s_nationkey = n_nationkey
    AND p_partkey <= CAST(1000 * {sf} AS BIGINT)
) AS profit
GROUP BY nation, o_year
ORDER BY nation, o_year DESC
